import ArgumentParser
import Foundation
import Stallmon
import StallmonReport

/// `stallmon tail [LOG]`: the event log, optionally followed.
struct TailCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tail",
        abstract: "Print the last events of the JSON-lines event log, and optionally follow it.",
        discussion: """
            Events: stall.begin (a stall is happening now), stall.interim, stall.end (with duration, top frame and \
            report path), loop.stats (a loop's busy-time percentiles and utilization over loop_stats_interval_s), \
            process.frozen, monitor.error. --follow keeps reading as events are appended and survives log rotation. \
            Lines that are not events are passed to standard error.

            Exit status: 0, or 1 when the log cannot be read.
            """)

    @Argument(help: "Event log (default: event_log of the configuration).")
    var log: String?

    @Flag(name: [.short, .long], help: "Keep printing new events as they are written.")
    var follow = false

    @Option(name: [.customShort("n"), .long], help: "Print the last N events first.")
    var lines: Int = 10

    @Option(help: "Output format: pretty or json (the raw lines).")
    var format: TailFormat = .pretty

    @OptionGroup var config: ConfigOptions

    enum TailFormat: String, ExpressibleByArgument, CaseIterable {
        case pretty
        case json
    }

    func validate() throws {
        guard lines >= 0 else { throw ValidationError("--lines must not be negative") }
    }

    func run() throws {
        let configuration = try config.load()  // validated even when LOG is given
        let path = log ?? configuration.reports.resolvedEventLogPath
        var reader = LogFollower(path: path)
        guard let initial = reader.readNew() else {
            warn("\(path): cannot read event log")
            throw ExitCode(1)
        }
        // -n counts events: walking back from the end, lines that are not events do not use up N; those inside the
        // window printed are reported on stderr, older ones are none of this command's business.
        var window: [String] = []
        var count = 0
        for line in initial.reversed() where count < lines {
            window.append(line)
            if (try? JSONDecoder().decode(StallEvent.self, from: Data(line.utf8))) != nil { count += 1 }
        }
        for (line, event) in window.reversed().compactMap(parse) { emit(line, event) }
        guard follow else { return }
        while true {
            usleep(200_000)
            for (line, event) in (reader.readNew() ?? []).compactMap(parse) { emit(line, event) }
        }
    }

    /// The line and its event, or nil after a warning on stderr.
    private func parse(_ line: String) -> (String, StallEvent)? {
        guard let event = try? JSONDecoder().decode(StallEvent.self, from: Data(line.utf8)) else {
            warn("not an event: \(line)")
            return nil
        }
        return (line, event)
    }

    private func emit(_ line: String, _ event: StallEvent) {
        output(format == .json ? line : EventText.render(event))
    }

    /// Unbuffered, so a follower piped into another program sees each event at once.
    private func output(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }
}

/// Reads complete lines appended to a log since the last call. It keeps the file open, so lines appended just
/// before a rotation are still read from the old file before it moves on to the new one; a file truncated in place
/// is read again from the start.
struct LogFollower {
    let path: String
    private var fd: Int32 = -1
    private var inode: UInt64 = 0
    private var offset: off_t = 0
    private var partial: [UInt8] = []

    init(path: String) {
        self.path = path
    }

    /// New complete lines, or nil when the log has never been readable.
    mutating func readNew() -> [String]? {
        var lines: [String] = []
        if fd < 0 {
            guard open() else { return nil }
        }
        var onDisk = stat()
        let pathExists = stat(path, &onDisk) == 0
        var current = stat()
        _ = fstat(fd, &current)
        if current.st_size < offset {  // truncated in place
            offset = 0
            partial = []
        }
        lines += drain()
        if pathExists && UInt64(onDisk.st_ino) != inode {  // rotated: the old file is fully read, switch
            close(fd)
            fd = -1
            partial = []
            if open() { lines += drain() }
        }
        return lines
    }

    private mutating func open() -> Bool {
        let opened = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard opened >= 0 else { return false }
        var info = stat()
        fstat(opened, &info)
        fd = opened
        inode = UInt64(info.st_ino)
        offset = 0
        return true
    }

    private mutating func drain() -> [String] {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let got = pread(fd, &buffer, buffer.count, offset)
            if got <= 0 { break }
            offset += off_t(got)
            partial += buffer[0..<got]
        }
        var lines: [String] = []
        while let newline = partial.firstIndex(of: UInt8(ascii: "\n")) {
            let line = String(decoding: partial[..<newline], as: UTF8.self)
            partial.removeSubrange(...newline)
            if !line.isEmpty { lines.append(line) }
        }
        return lines
    }
}

/// The human form of one event.
enum EventText {
    /// Milliseconds as ns, µs or ms: a pool's jobs run for microseconds.
    static func fine(_ milliseconds: Double) -> String {
        if milliseconds < 0.001 { return String(format: "%.0f ns", milliseconds * 1e6) }
        if milliseconds < 1 { return String(format: "%.1f µs", milliseconds * 1e3) }
        return ms(milliseconds)
    }

    static func render(_ event: StallEvent) -> String {
        var parts = [event.time, event.event.padding(toLength: 13, withPad: " ", startingAt: 0)]
        if let loop = event.loop { parts.append(loop) }
        switch event.event {
        case "stall.begin":
            if let elapsed = event.elapsedMs { parts.append("busy \(ms(elapsed)) (threshold \(ms(event.thresholdMs ?? 0)))") }
        case "stall.interim", "stall.end":
            if let duration = event.durationMs { parts.append(ms(duration)) }
            if let samples = event.samples { parts.append("\(samples) samples") }
        case "loop.stats":
            if let iterations = event.iterations, let window = event.windowS {
                parts.append("\(iterations) iterations in \(String(format: "%.0f", window)) s")
            }
            if let p50 = event.busyP50Ms, let p99 = event.busyP99Ms, let max = event.busyMaxMs {
                parts.append("busy p50 \(ms(p50)) p99 \(ms(p99)) max \(ms(max))")
            }
            if let utilization = event.utilization {
                parts.append("utilization \(String(format: "%.1f", utilization * 100)) %")
            }
        case "pool.stats":
            if let priority = event.priority { parts.append(priority) }
            if let jobs = event.jobs, let window = event.windowS {
                parts.append("\(jobs) jobs in \(String(format: "%.0f", window)) s")
            }
            if let p50 = event.runP50Ms, let p99 = event.runP99Ms, let max = event.runMaxMs {
                parts.append("run p50 \(fine(p50)) p99 \(fine(p99)) max \(fine(max))")
            }
            if let p50 = event.delayP50Ms, let p99 = event.delayP99Ms, let max = event.delayMaxMs {
                parts.append("queue delay p50 \(fine(p50)) p99 \(fine(p99)) max \(fine(max))")
            }
            if let slow = event.slowJobs, let long = event.longDelays {
                parts.append("\(slow) slow, \(long) delayed past the threshold")
            }
            if let utilization = event.utilization {
                parts.append("busy \(String(format: "%.1f", utilization * 100)) %")
            }
            if let workers = event.workers { parts.append("\(workers) workers") }
        default:
            if let message = event.message { parts.append(message) }
            if let count = event.count { parts.append("count \(count)") }
        }
        if let label = event.label { parts.append("running \(label)") }
        if let traceId = event.traceId { parts.append("trace \(traceId)") }
        if let mode = event.mode, mode != "default" { parts.append("in mode \(mode)") }
        if let top = event.topFrame { parts.append("in \(top)") }
        if let report = event.report { parts.append("→ \(report)") }
        return parts.joined(separator: "  ")
    }
}
