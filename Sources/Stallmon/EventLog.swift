import CStallmonCapture
import Foundation

/// One line of the JSON-lines event log. Fields that do not apply to an event are omitted.
public struct StallEvent: Codable, Sendable, Equatable {
    /// Wall clock, ISO 8601 UTC with milliseconds.
    public var time: String
    /// `stall.begin`, `stall.interim`, `stall.end`, `process.frozen` or `monitor.error`.
    public var event: String
    public var id: String?
    public var loop: String?
    public var tid: Int32?
    public var thresholdMs: Double?
    /// For `stall.begin`: how long the iteration had been busy when the watchdog noticed.
    public var elapsedMs: Double?
    public var durationMs: Double?
    public var label: String?
    public var topFrame: String?
    public var samples: Int?
    /// Path of the report written for this event.
    public var report: String?
    public var count: Int?
    public var message: String?
    /// `cpu`, `blocked` or `starved` (JSON key `class`).
    public var stallClass: StallClass?
    public var signature: String?
    /// True on a `stall.end` whose report was not written because its signature hit the rate limit.
    public var suppressed: Bool?

    enum CodingKeys: String, CodingKey {
        case time, event, id, loop, tid, thresholdMs, elapsedMs, durationMs, label, topFrame, samples, report, count
        case message
        case stallClass = "class"
        case signature, suppressed
    }

    public init(time: String, event: String) {
        self.time = time
        self.event = event
    }
}

/// Appends events, one JSON object per line, to a size-rotated file (`events.jsonl`, `events.jsonl.1`, …).
/// Used from the writer thread only.
final class EventLog {
    let path: String
    let maxBytes: Int
    let maxFiles: Int
    private var fd: Int32 = -1
    private var size = 0
    private let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        return encoder
    }()

    init(path: String, maxBytes: Int, maxFiles: Int) {
        self.path = path
        self.maxBytes = maxBytes
        self.maxFiles = maxFiles
    }

    deinit {
        if fd >= 0 { close(fd) }
    }

    /// Appends one line with a single write(2), so concurrent readers (`tail -f`) never see half a line.
    func append(_ event: StallEvent) throws(FileError) {
        var line: [UInt8]
        do {
            line = Array(try encoder.encode(event))
        } catch {
            throw FileError(path: path, operation: "encode event for", errorNumber: EINVAL)
        }
        line.append(UInt8(ascii: "\n"))
        try openIfNeeded()
        if size > 0 && size + line.count > maxBytes { try rotate() }
        do {
            try AtomicFile.writeAll(fd, line, path: path)
        } catch {
            // A partial write (ENOSPC, EFBIG) must not leave half a line for the next event to be glued to.
            _ = ftruncate(fd, off_t(size))
            close(fd)  // reopen next time: the file may have been removed or the disk freed
            fd = -1
            throw error
        }
        size += line.count
    }

    private func openIfNeeded() throws(FileError) {
        if fd >= 0 {
            // Reopen if someone moved or deleted the file underneath us (logrotate, cleanup).
            var onDisk = stat()
            var open = stat()
            if stat(path, &onDisk) == 0, fstat(fd, &open) == 0, onDisk.st_ino == open.st_ino { return }
            close(fd)
            fd = -1
        }
        try AtomicFile.createDirectory(AtomicFile.parentDirectory(of: path))
        fd = Glibc.open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .last("open", path) }
        var info = stat()
        size = fstat(fd, &info) == 0 ? Int(info.st_size) : 0
    }

    private func rotate() throws(FileError) {
        close(fd)
        fd = -1
        if maxFiles == 0 {
            _ = unlink(path)
        } else {
            _ = unlink("\(path).\(maxFiles)")
            if maxFiles > 1 {
                for index in stride(from: maxFiles - 1, through: 1, by: -1) {
                    _ = rename("\(path).\(index)", "\(path).\(index + 1)")
                }
            }
            guard rename(path, "\(path).1") == 0 else { throw .last("rotate", path) }
        }
        try openIfNeeded()
    }
}

enum WallClock {
    /// ISO 8601 UTC with milliseconds for CLOCK_REALTIME nanoseconds.
    static func iso8601(nanoseconds: UInt64) -> String {
        var seconds = time_t(nanoseconds / 1_000_000_000)
        let milliseconds = Int(nanoseconds % 1_000_000_000 / 1_000_000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func pad(_ value: Int32, _ width: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))T"
            + "\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2))."
            + "\(pad(Int32(milliseconds), 3))Z"
    }

    static func nowNanoseconds() -> UInt64 {
        cstallmon_realtime_ns()
    }
}
