import Foundation

/// Stall reports as a timeline in the Chrome JSON trace format (the "Trace Event Format"), which ui.perfetto.dev and
/// `chrome://tracing` open: a process per monitored process, a track per loop, pool or starved pool, each stall a
/// slice named by its top function and label, hangs and still-ongoing stalls as instants, and the CPU limit's
/// throttled time and CPU pressure over each stall as counters.
///
/// Times are microseconds since the Unix epoch, from the reports' wall-clock starts. Slices of one track never
/// overlap: a stall that begins before the previous one on its track ended (stalls of two pool workers, or two
/// processes of one pid) goes to the track's next lane (`swift-global-executor #2`), so every track nests as the
/// format requires.
package enum StallTimeline {
    /// What the timeline reads of a report: the summary's digest and the members a slice shows besides. Decoded
    /// alone (`ReportReader.decodeSubset`), without samples, frames or images.
    package struct Entry: ReportSubset, Equatable {
        package var digest: StallDigest
        package var process: StallReport.ProcessDescription
        package var thread: StallReport.ThreadDescription
        package var label: String
        package var traceId: String?
        package var spanId: String?
        package var hang: StallReport.Hang?
        package var cpuContention: StallReport.CPUContention?

        private enum CodingKeys: String, CodingKey {
            case process, thread, label, traceId, spanId, hang, cpuContention
        }

        package var schema: String { digest.schema }
        package var startWall: String { digest.start.wall }

        package init(from decoder: any Decoder) throws {
            digest = try StallDigest(from: decoder)
            let container = try decoder.container(keyedBy: CodingKeys.self)
            process = try container.decode(StallReport.ProcessDescription.self, forKey: .process)
            thread = try container.decode(StallReport.ThreadDescription.self, forKey: .thread)
            label = try container.decode(String.self, forKey: .label)
            traceId = try container.decodeIfPresent(String.self, forKey: .traceId)
            spanId = try container.decodeIfPresent(String.self, forKey: .spanId)
            hang = try container.decodeIfPresent(StallReport.Hang.self, forKey: .hang)
            cpuContention = try container.decodeIfPresent(StallReport.CPUContention.self, forKey: .cpuContention)
        }

        package init(_ report: StallReport) {
            digest = StallDigest(report)
            process = report.process
            thread = report.thread
            label = report.label
            traceId = report.traceId
            spanId = report.spanId
            hang = report.hang
            cpuContention = report.cpuContention
        }
    }

    /// One event of the format. Only the members an event's phase uses are written.
    package struct Event: Equatable {
        package var name: String
        /// `X` complete slice, `i` instant, `C` counter, `M` metadata.
        package var ph: String
        package var pid: Int
        package var tid: Int?
        package var ts: Double?
        package var dur: Double?
        package var cat: String?
        /// An instant's scope: `t`, its track.
        package var s: String?
        package var args: [String: Argument]?
    }

    package enum Argument: Equatable {
        case text(String)
        case number(Double)
        case flag(Bool)
    }

    /// The trace of `reports` (`paths`, when given, name each report's file in its slice).
    package static func events(_ reports: [Entry], paths: [String]? = nil) -> [Event] {
        var layout = Layout()
        var events: [Event] = []
        let starts = reports.map(start(of:))
        let order = reports.indices.filter { starts[$0] != nil }.sorted { starts[$0]! < starts[$1]! }
        for index in order {
            let report = reports[index]
            let begin = starts[index]!
            let duration = max(0, (report.digest.durationMs * 1_000_000).rounded() / 1000)
            let pid = layout.process(of: report)
            let tid = layout.track(pid: pid, name: trackName(of: report), from: begin, to: begin + duration)
            var args: [String: Argument] = ["durationMs": .number(report.digest.durationMs), "id": .text(report.digest.id),
                                            "thread": .number(Double(report.thread.tid))]
            if let stallClass = report.digest.stallClass { args["class"] = .text(stallClass.rawValue) }
            if !report.label.isEmpty { args["label"] = .text(report.label) }
            if let signature = report.digest.signature { args["signature"] = .text(signature) }
            if let traceID = report.traceId { args["traceId"] = .text(traceID) }
            if let spanID = report.spanId { args["spanId"] = .text(spanID) }
            if let top = report.digest.topFrame { args["topFrame"] = .text(top.displayName) }
            if report.digest.ongoing { args["ongoing"] = .flag(true) }
            if let path = paths?[index] { args["report"] = .text(path) }
            events.append(Event(name: sliceName(of: report), ph: "X", pid: pid, tid: tid, ts: begin, dur: duration,
                                cat: report.digest.kind ?? "stall", args: args))
            if let hang = report.hang {
                events.append(Event(name: "hang: \(hang.action) after \(Self.wholeMilliseconds(hang.afterMs)) ms",
                                    ph: "i", pid: pid,
                                    tid: tid, ts: begin + min(duration, hang.afterMs * 1000), cat: "hang", s: "t"))
            }
            if report.digest.ongoing {
                events.append(Event(name: "still ongoing when last written", ph: "i", pid: pid, tid: tid,
                                    ts: begin + duration, cat: "interim", s: "t"))
            }
            events += counters(of: report, pid: pid, from: begin, to: begin + duration)
        }
        return layout.metadata() + events
    }

    /// The whole trace file: `{"traceEvents": [...], "displayTimeUnit": "ms"}`. Written by hand (`TraceWriter`):
    /// JSONEncoder took a fifth of the time of a 100,000-report timeline, on one core.
    package static func json(_ reports: [Entry], paths: [String]? = nil) throws -> Data {
        var writer = TraceWriter()
        writer.raw(#"{"traceEvents":["#)
        for (index, event) in events(reports, paths: paths).enumerated() {
            if index > 0 { writer.raw(",\n") }
            writer.event(event)
        }
        writer.raw(#"],"displayTimeUnit":"ms"}"#)
        return Data(writer.bytes)
    }

    /// A figure from a report as whole milliseconds for a name, without trapping on one no Int holds.
    static func wholeMilliseconds(_ value: Double) -> String {
        value.isFinite && abs(value) < 1e15 ? String(Int(value.rounded())) : String(value)
    }

    /// The report's start, microseconds since the epoch (whole ones and the nanoseconds apart: a Double holds
    /// today's microseconds exactly, not today's nanoseconds).
    private static func start(of report: Entry) -> Double? {
        WallTime.unixNanoseconds(report.digest.start.wall).map { Double($0 / 1000) + Double($0 % 1000) / 1000 }
    }

    /// The top function (the innermost of the service's own code) and the label: `App.handle(request:) [GET /x]`.
    static func sliceName(of report: Entry) -> String {
        var name = report.digest.topFrame?.symbol ?? "(no in-app frame)"
        if report.digest.kind == "starvation" { name = "starved: " + name }
        if !report.label.isEmpty { name += " [\(report.label)]" }
        return name
    }

    private static func trackName(of report: Entry) -> String {
        report.digest.kind == "starvation" ? "\(report.digest.loop) starvation" : report.digest.loop
    }

    /// Throttled time and pressure over the stall, per loop, back to 0 at its end.
    private static func counters(of report: Entry, pid: Int, from begin: Double, to end: Double) -> [Event] {
        guard let contention = report.cpuContention else { return [] }
        var events: [Event] = []
        func counter(_ name: String, _ value: Double?) {
            guard let value else { return }
            events.append(Event(name: name, ph: "C", pid: pid, ts: begin, args: [report.digest.loop: .number(value)]))
            events.append(Event(name: name, ph: "C", pid: pid, ts: end, args: [report.digest.loop: .number(0)]))
        }
        counter("throttled ms in stall", contention.throttledMs)
        counter("cpu pressure % over stall", contention.pressureSomePercent)
        return events
    }

    /// Processes and tracks, numbered in the order met; each track's lanes keep its slices from overlapping.
    private struct Layout {
        private var processes: [String: Int] = [:]
        private var processNames: [Int: String] = [:]
        /// Per process and track name: each lane's tid and where its latest slice ends.
        private var lanes: [Int: [String: [(tid: Int, end: Double)]]] = [:]
        private var trackNames: [(pid: Int, tid: Int, name: String)] = []

        mutating func process(of report: Entry) -> Int {
            let key = "\(report.process.hostname)\u{0}\(report.process.pid)\u{0}\(report.process.executable)"
            if let known = processes[key] { return known }
            let pid = processes.count + 1
            processes[key] = pid
            let executable = report.process.executable.split(separator: "/").last.map(String.init)
                ?? report.process.executable
            processNames[pid] = "\(executable) (pid \(report.process.pid) on \(report.process.hostname))"
            return pid
        }

        mutating func track(pid: Int, name: String, from begin: Double, to end: Double) -> Int {
            var tracks = lanes[pid] ?? [:]
            var laneList = tracks[name] ?? []
            defer {
                tracks[name] = laneList
                lanes[pid] = tracks
            }
            if let free = laneList.firstIndex(where: { $0.end <= begin }) {
                laneList[free].end = end
                return laneList[free].tid
            }
            let tid = trackNames.filter { $0.pid == pid }.count + 1
            laneList.append((tid, end))
            trackNames.append((pid, tid, laneList.count == 1 ? name : "\(name) #\(laneList.count)"))
            return tid
        }

        func metadata() -> [Event] {
            processNames.sorted { $0.key < $1.key }.map { pid, name in
                Event(name: "process_name", ph: "M", pid: pid, args: ["name": .text(name)])
            } + trackNames.flatMap { track in
                [Event(name: "thread_name", ph: "M", pid: track.pid, tid: track.tid, args: ["name": .text(track.name)]),
                 Event(name: "thread_sort_index", ph: "M", pid: track.pid, tid: track.tid,
                       args: ["sort_index": .number(Double(track.tid))])]
            }
        }
    }
}

/// The trace's JSON, byte by byte: strings escaped as RFC 8259 requires, numbers in Swift's shortest form that
/// reads back to the same Double.
private struct TraceWriter {
    var bytes: [UInt8] = []

    mutating func raw(_ text: String) {
        bytes.append(contentsOf: text.utf8)
    }

    mutating func event(_ event: StallTimeline.Event) {
        raw("{")
        member("name", first: true)
        string(event.name)
        member("ph", text: event.ph)
        member("pid", number: Double(event.pid))
        member("tid", number: event.tid.map(Double.init))
        member("ts", number: event.ts)
        member("dur", number: event.dur)
        member("cat", text: event.cat)
        member("s", text: event.s)
        if let args = event.args {
            member("args")
            raw("{")
            for (index, key) in args.keys.sorted().enumerated() {
                if index > 0 { raw(",") }
                string(key)
                raw(":")
                switch args[key]! {
                case .text(let text): string(text)
                case .number(let value): number(value)
                case .flag(let flag): raw(flag ? "true" : "false")
                }
            }
            raw("}")
        }
        raw("}")
    }

    private mutating func member(_ key: String, first: Bool = false) {
        if !first { bytes.append(UInt8(ascii: ",")) }
        string(key)
        bytes.append(UInt8(ascii: ":"))
    }

    /// The member, or nothing when the event has no such value.
    private mutating func member(_ key: String, text: String?) {
        guard let text else { return }
        member(key)
        string(text)
    }

    private mutating func member(_ key: String, number value: Double?) {
        guard let value else { return }
        member(key)
        number(value)
    }

    mutating func number(_ value: Double) {
        guard value.isFinite else {
            raw("0")  // JSON has no NaN or infinity; no figure here is either
            return
        }
        if value == value.rounded(), abs(value) < 9e15 {  // integers Double holds exactly
            raw(String(Int64(value)))
        } else {
            raw(String(value))
        }
    }

    mutating func string(_ text: String) {
        bytes.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case UInt8(ascii: "\\"): bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case 0x0A: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0x0D: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case 0x09: bytes.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                bytes.append(contentsOf: Array(#"\u00"#.utf8))
                bytes.append(hex[Int(byte >> 4)])
                bytes.append(hex[Int(byte & 0xF)])
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }
}
