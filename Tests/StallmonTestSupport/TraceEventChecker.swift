import Foundation

/// The rules of the Chrome JSON trace format (the "Trace Event Format" document) that `stallmon report --timeline`
/// relies on, checked independently of the code that writes it: Perfetto's trace processor cannot be installed here
/// (it downloads its binary on first use, and this machine is offline).
public enum TraceEventChecker {
    /// One slice (`ph: X`) as the checker read it.
    public struct Slice: Equatable, Sendable {
        public var pid: Int
        public var tid: Int
        public var name: String
        public var ts: Double
        public var dur: Double
        public var args: [String: String]
    }

    public struct Checked: Sendable {
        public var slices: [Slice]
        public var instants: [(pid: Int, tid: Int, name: String, ts: Double)]
        public var counters: [(pid: Int, name: String, ts: Double, values: [String: Double])]
        /// Track names by (pid, tid), process names by pid.
        public var threadNames: [String: String]
        public var processNames: [Int: String]
    }

    /// Every rule broken by `data`, in words; empty when the trace is well formed.
    public static func problems(_ data: Data) -> [String] {
        switch check(data) {
        case .success: return []
        case .failure(let problems): return problems.list
        }
    }

    public struct Problems: Error { public var list: [String] }

    public static func check(_ data: Data) -> Result<Checked, Problems> {
        var problems: [String] = []
        guard let root = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
              let events = root["traceEvents"] as? [[String: Any]] else {
            return .failure(Problems(list: ["not an object with a traceEvents array of objects"]))
        }
        var checked = Checked(slices: [], instants: [], counters: [], threadNames: [:], processNames: [:])
        var used: Set<String> = []
        for (index, event) in events.enumerated() {
            func problem(_ text: String) { problems.append("event \(index) (\(event["name"] ?? "?")): \(text)") }
            guard let phase = event["ph"] as? String else { problem("no ph"); continue }
            guard let name = event["name"] as? String, !name.isEmpty else { problem("no name"); continue }
            guard let pid = integer(event["pid"]) else { problem("no integer pid"); continue }
            let tid = integer(event["tid"])
            let ts = event["ts"] as? Double
            if phase != "M" {
                guard let ts else { problem("no numeric ts"); continue }
                // Microseconds since the epoch: 2001 to 2100 (milliseconds or nanoseconds fall outside).
                if ts < 9.8e14 || ts > 4.2e15 { problem("ts \(ts) is no microsecond time of 2001–2100") }
            }
            switch phase {
            case "X":
                guard let tid else { problem("a slice without tid"); continue }
                guard let dur = event["dur"] as? Double, dur >= 0 else { problem("no dur ≥ 0"); continue }
                let args = (event["args"] as? [String: Any] ?? [:]).mapValues { "\($0)" }
                checked.slices.append(Slice(pid: pid, tid: tid, name: name, ts: ts!, dur: dur, args: args))
                used.insert("\(pid)/\(tid)")
            case "i", "I":
                guard let scope = event["s"] as? String, ["g", "p", "t"].contains(scope) else {
                    problem("an instant's s must be g, p or t"); continue
                }
                if scope == "t" {
                    guard let tid else { problem("a thread instant without tid"); continue }
                    used.insert("\(pid)/\(tid)")
                    checked.instants.append((pid, tid, name, ts!))
                }
            case "C":
                guard let args = event["args"] as? [String: Any], !args.isEmpty,
                      args.values.allSatisfy({ $0 is Double }) else {
                    problem("a counter needs numeric args"); continue
                }
                checked.counters.append((pid, name, ts!, args.mapValues { $0 as! Double }))
            case "M":
                let args = event["args"] as? [String: Any] ?? [:]
                switch name {
                case "process_name":
                    guard let value = args["name"] as? String else { problem("process_name without args.name"); continue }
                    checked.processNames[pid] = value
                case "thread_name":
                    guard let tid, let value = args["name"] as? String else {
                        problem("thread_name without tid or args.name"); continue
                    }
                    checked.threadNames["\(pid)/\(tid)"] = value
                case "thread_sort_index", "process_sort_index":
                    guard args["sort_index"] is Double else { problem("\(name) without a numeric sort_index"); continue }
                default: problem("unknown metadata \(name)")
                }
            default:
                problem("phase \(phase) is not one stallmon writes (X, i, C, M)")
            }
        }
        for track in used.sorted() where checked.threadNames[track] == nil { problems.append("track \(track) has no thread_name") }
        for pid in Set(checked.slices.map(\.pid)) where checked.processNames[pid] == nil {
            problems.append("process \(pid) has no process_name")
        }
        problems += nesting(checked.slices)
        return problems.isEmpty ? .success(checked) : .failure(Problems(list: problems))
    }

    /// Slices of one track must nest: each either after the ones open before it, or within the innermost open one.
    static func nesting(_ slices: [Slice]) -> [String] {
        var problems: [String] = []
        for (track, onTrack) in Dictionary(grouping: slices, by: { "\($0.pid)/\($0.tid)" }) {
            var open: [Slice] = []
            for slice in onTrack.sorted(by: { ($0.ts, -$0.dur) < ($1.ts, -$1.dur) }) {
                while let last = open.last, last.ts + last.dur <= slice.ts { open.removeLast() }
                if let last = open.last, slice.ts + slice.dur > last.ts + last.dur {
                    problems.append("track \(track): \(slice.name) at \(slice.ts) overlaps \(last.name) without nesting")
                }
                open.append(slice)
            }
        }
        return problems
    }

    private static func integer(_ value: Any?) -> Int? {
        guard let number = value as? Double, number == number.rounded() else { return nil }
        return Int(number)
    }
}
