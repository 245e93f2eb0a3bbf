import ArgumentParser
import Foundation
import Stallmon

/// `stallmon tail [LOG]`: the event log, optionally followed.
struct TailCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tail",
        abstract: "Print the last events of the JSON-lines event log, and optionally follow it.",
        discussion: """
            Events: stall.begin (a stall is happening now), stall.interim, stall.end (with duration, top frame and \
            report path), monitor.error. --follow keeps reading as events are appended and survives log rotation. \
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
        let path = try log ?? config.load().resolvedEventLogPath
        var reader = LogFollower(path: path)
        guard let initial = reader.readNew() else {
            warn("\(path): cannot read event log")
            throw ExitCode(1)
        }
        for line in initial.suffix(lines) { emit(line) }
        guard follow else { return }
        while true {
            usleep(200_000)
            for line in reader.readNew() ?? [] { emit(line) }
        }
    }

    private func emit(_ line: String) {
        guard format == .pretty else {
            output(line)
            return
        }
        guard let event = try? JSONDecoder().decode(StallEvent.self, from: Data(line.utf8)) else {
            warn("not an event: \(line)")
            return
        }
        output(EventText.render(event))
    }

    /// Unbuffered, so a follower piped into another program sees each event at once.
    private func output(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }
}

/// Reads complete lines appended to a file since the last call; starts over when the file is replaced or shrinks.
struct LogFollower {
    let path: String
    private var inode: UInt64 = 0
    private var offset: UInt64 = 0
    private var partial = Data()

    init(path: String) {
        self.path = path
    }

    /// New complete lines, or nil when the file cannot be opened.
    mutating func readNew() -> [String]? {
        guard let handle = FileHandle(forReadingAtPath: path) else { return nil }
        defer { try? handle.close() }
        var info = stat()
        guard fstat(handle.fileDescriptor, &info) == 0 else { return nil }
        if UInt64(info.st_ino) != inode || UInt64(info.st_size) < offset {
            inode = UInt64(info.st_ino)
            offset = 0
            partial = Data()
        }
        try? handle.seek(toOffset: offset)
        let data = (try? handle.readToEnd()) ?? Data()
        offset += UInt64(data.count)
        partial.append(data)
        var lines: [String] = []
        while let newline = partial.firstIndex(of: UInt8(ascii: "\n")) {
            let line = String(decoding: partial[partial.startIndex..<newline], as: UTF8.self)
            partial = Data(partial[partial.index(after: newline)...])
            if !line.isEmpty { lines.append(line) }
        }
        return lines
    }
}

/// The human form of one event.
enum EventText {
    static func render(_ event: StallEvent) -> String {
        var parts = [event.time, event.event.padding(toLength: 13, withPad: " ", startingAt: 0)]
        if let loop = event.loop { parts.append(loop) }
        switch event.event {
        case "stall.begin":
            if let elapsed = event.elapsedMs { parts.append("busy \(ms(elapsed)) (threshold \(ms(event.thresholdMs ?? 0)))") }
        case "stall.interim", "stall.end":
            if let duration = event.durationMs { parts.append(ms(duration)) }
            if let samples = event.samples { parts.append("\(samples) samples") }
        default:
            if let message = event.message { parts.append(message) }
            if let count = event.count { parts.append("count \(count)") }
        }
        if let label = event.label { parts.append("running \(label)") }
        if let top = event.topFrame { parts.append("in \(top)") }
        if let report = event.report { parts.append("→ \(report)") }
        return parts.joined(separator: "  ")
    }
}
