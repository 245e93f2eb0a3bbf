/// What `stallmon report` prints: counts, duration percentiles, and stalls grouped by their top in-app frame.
/// The JSON form (schema `stallmon.summary/1`) is a documented contract.
public struct StallSummary: Codable, Sendable, Equatable {
    public static let currentSchema = "stallmon.summary/1"

    public var schema: String
    public var directory: String
    /// Reports read (interim reports of stalls still going on included, flagged by `ongoing`).
    public var stalls: Int
    public var ongoing: Int
    /// Files that looked like reports but could not be read.
    public var unreadable: Int
    public var durationMs: Percentiles?
    /// Earliest and latest stall start (ISO 8601).
    public var firstStart: String?
    public var lastStart: String?
    public var loops: [String]
    /// Groups by top in-app frame, most stalls first.
    public var groups: [Group]

    public struct Percentiles: Codable, Sendable, Equatable {
        public var p50: Double
        public var p90: Double
        public var p99: Double
        public var max: Double
        public var total: Double
    }

    public struct Group: Codable, Sendable, Equatable {
        /// The top in-app frame's symbol, or "<no in-app frame>".
        public var topFrame: String
        public var file: String?
        public var line: Int?
        public var count: Int
        public var totalMs: Double
        public var maxMs: Double
        public var p50Ms: Double
        public var loops: [String]
        /// Ids of the stalls, newest last.
        public var reportIds: [String]
        /// The longest stall's report, to open with `stallmon show`.
        public var example: String
    }

    /// Summarizes `reports` (path and report).
    public init(directory: String, reports: [(path: String, report: StallReport)], unreadable: Int) {
        schema = Self.currentSchema
        self.directory = directory
        stalls = reports.count
        ongoing = reports.filter(\.report.ongoing).count
        self.unreadable = unreadable
        let durations = reports.map(\.report.durationMs).sorted()
        durationMs = durations.isEmpty ? nil : Percentiles(
            p50: Self.percentile(durations, 0.50), p90: Self.percentile(durations, 0.90),
            p99: Self.percentile(durations, 0.99), max: durations.last!, total: durations.reduce(0, +))
        let starts = reports.map(\.report.start.wall).sorted()
        firstStart = starts.first
        lastStart = starts.last
        loops = Array(Set(reports.map(\.report.loop))).sorted()

        var buckets: [String: [(path: String, report: StallReport)]] = [:]
        for entry in reports {
            buckets[entry.report.topFrame?.symbol ?? Self.noInAppFrame, default: []].append(entry)
        }
        groups = buckets.map { key, members in
            let sorted = members.map(\.report.durationMs).sorted()
            let longest = members.max { $0.report.durationMs < $1.report.durationMs }!
            return Group(topFrame: key, file: members.first?.report.topFrame?.file,
                         line: members.first?.report.topFrame?.line, count: members.count,
                         totalMs: sorted.reduce(0, +), maxMs: sorted.last ?? 0,
                         p50Ms: Self.percentile(sorted, 0.5), loops: Array(Set(members.map(\.report.loop))).sorted(),
                         reportIds: members.map(\.report.id), example: longest.path)
        }.sorted { ($0.count, $0.totalMs) > ($1.count, $1.totalMs) }
    }

    public static let noInAppFrame = "<no in-app frame>"

    /// Nearest-rank percentile of sorted values.
    static func percentile(_ sorted: [Double], _ fraction: Double) -> Double {
        guard !sorted.isEmpty else { return 0 }
        let rank = Int((fraction * Double(sorted.count)).rounded(.up))
        return sorted[min(max(rank, 1), sorted.count) - 1]
    }
}
