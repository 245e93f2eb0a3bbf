import CStallmonCapture
import Foundation
import StallmonReport

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
