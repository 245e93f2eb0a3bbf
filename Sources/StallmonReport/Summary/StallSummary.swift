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
    /// Stalls per class (`cpu`, `blocked`, `starved`, `unknown`).
    public var classes: [String: Int]
    /// Stalls that got no report of their own (rate limit), as counted by the reports that followed them.
    public var suppressed: Int
    /// Durations in fixed buckets (ms): [0,100) [100,200) [200,500) [500,1000) [1000,2000) [2000,5000)
    /// [5000,10000) [10000,∞).
    public var histogram: [Bucket]
    /// Groups by signature (or top in-app frame for reports without one), most stalls first.
    public var groups: [Group]

    public struct Bucket: Codable, Sendable, Equatable {
        public var lowerMs: Double
        /// nil for the last, open bucket.
        public var upperMs: Double?
        public var count: Int
    }

    public struct Percentiles: Codable, Sendable, Equatable {
        public var p50: Double
        public var p90: Double
        public var p99: Double
        public var max: Double
        public var total: Double
    }

    public struct Group: Codable, Sendable, Equatable {
        /// The stall signature shared by the group's reports, if they have one.
        public var signature: String?
        /// The most common class in the group.
        public var stallClass: StallClass?
        /// Stalls of this signature that got no report (rate limit).
        public var suppressed: Int
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
        /// What the group's blocked stalls waited on most (`StallReport.WaitingOn.groupDescription` of each
        /// report's main wait), and in how many of its stalls; nil when none says.
        public var waitingOn: String?
        public var waitingOnCount: Int?
        /// `starvation` for a group of starved-pool reports (their signature is their culprits' set, so a group
        /// never mixes them with stalls); absent for stalls.
        public var kind: String?
        /// With `stallmon report --chains`: the await chains its async stalls were reached through, most stalls
        /// first; absent otherwise, and for a group with no async frames.
        public var chains: [AwaitChainCount]?

        enum CodingKeys: String, CodingKey {
            case signature
            case stallClass = "class"
            case suppressed, topFrame, file, line, count, totalMs, maxMs, p50Ms, loops, reportIds, example
            case waitingOn, waitingOnCount, kind, chains
        }
    }

    /// One await chain of a group: the async functions that awaited the blocking code, innermost first (the service's
    /// own, when any is in-app), and how many of the group's stalls were reached through it.
    public struct AwaitChainCount: Codable, Sendable, Equatable {
        public var functions: [String]
        public var stalls: Int
    }

    /// The await chain of a report's hottest stack: the functions of its async frames, innermost first, named as
    /// written (`fetchLedger(_:)`, not its "(3) await resume partial function for …"); only the service's own when
    /// there are any (the compiler's thunks and the runtime's task root say nothing of who called). Empty when the
    /// stack has no async frame.
    public static func awaitChain(of report: StallReport) -> [String] {
        let frames = (report.hottestStack?.frames ?? []).compactMap {
            report.frames.indices.contains($0) ? report.frames[$0] : nil
        }.filter { $0.async == true }
        let named = frames.map {
            (frame: $0, function: StallReport.Frame.withoutPartialFunctionPrefix($0.functionKey))
        }
        let own = named.filter { $0.frame.inApp && !isCompilerThunk($0.function) }
        return (own.isEmpty ? named : own).map(\.function)
    }

    /// The compiler's glue between a closure and the task that runs it: in the executable, but nobody's call site.
    static func isCompilerThunk(_ function: String) -> Bool {
        function.hasPrefix("partial apply forwarder for ") || function.hasPrefix("reabstraction thunk helper ")
            || function.hasPrefix("thunk for ")
    }

    /// Fills in each group's `chains` from the full `reports` (matched to its members by id).
    public mutating func addAwaitChains(_ reports: [StallReport]) {
        let byID = Dictionary(reports.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        for index in groups.indices {
            var counts: [[String]: (stalls: Int, first: Int)] = [:]
            for id in groups[index].reportIds {
                guard let report = byID[id] else { continue }
                let chain = Self.awaitChain(of: report)
                guard !chain.isEmpty else { continue }
                let order = counts.count
                counts[chain, default: (0, order)].stalls += 1
            }
            guard !counts.isEmpty else { continue }
            groups[index].chains = counts
                .sorted { ($0.value.stalls, -$0.value.first) > ($1.value.stalls, -$1.value.first) }
                .map { AwaitChainCount(functions: $0.key, stalls: $0.value.stalls) }
        }
    }

    public static let bucketEdges: [Double] = [0, 100, 200, 500, 1000, 2000, 5000, 10000]

    /// Summarizes `reports` (path and report).
    public init(directory: String, reports: [(path: String, report: StallReport)], unreadable: Int) {
        self.init(directory: directory, digests: reports.map { ($0.path, StallDigest($0.report)) },
                  unreadable: unreadable)
    }

    /// Summarizes reports from their digests (path and digest). Where a group takes its "first" member, it is the
    /// first in `reports`' order.
    public init(directory: String, digests reports: [(path: String, report: StallDigest)], unreadable: Int) {
        var builder = Builder()
        for (index, entry) in reports.enumerated() {
            builder.add(entry.report, path: entry.path, order: Builder.Order(start: "", index: index))
        }
        self = builder.summary(directory: directory, unreadable: unreadable)
    }

    public static let noInAppFrame = "<no in-app frame>"

    /// Counts read from files are not trusted: add without overflowing (negative counts count as zero).
    static func saturatingAdd(_ total: Int, _ value: Int) -> Int {
        let (sum, overflow) = total.addingReportingOverflow(max(0, value))
        return overflow ? .max : sum
    }

    /// Nearest-rank percentile of sorted values.
    static func percentile(_ sorted: [Double], _ fraction: Double) -> Double {
        guard !sorted.isEmpty else { return 0 }
        let rank = Int((fraction * Double(sorted.count)).rounded(.up))
        return sorted[min(max(rank, 1), sorted.count) - 1]
    }
}

/// What a summary reads of one report: the members `stallmon report` counts, filters and groups by. Decoding only
/// these (`ReportReader.decodeDigest`) is what lets `report` read 100,000 reports in seconds.
public struct StallDigest: Codable, Sendable, Equatable {
    public var schema: String
    public var id: String
    public var ongoing: Bool
    public var loop: String
    public var start: StallReport.StartTime
    public var durationMs: Double
    public var stallClass: StallClass?
    public var signature: String?
    public var topFrame: StallReport.FrameSummary?
    public var suppressedBefore: Int?
    public var waitingOn: [StallReport.WaitingOn]?
    public var kind: String?

    enum CodingKeys: String, CodingKey {
        case schema, id, ongoing, loop, start, durationMs
        case stallClass = "class"
        case signature, topFrame, suppressedBefore, waitingOn, kind
    }

    public init(_ report: StallReport) {
        schema = report.schema
        id = report.id
        ongoing = report.ongoing
        loop = report.loop
        start = report.start
        durationMs = report.durationMs
        stallClass = report.stallClass
        signature = report.signature
        topFrame = report.topFrame
        suppressedBefore = report.suppressedBefore
        waitingOn = report.waitingOn
        kind = report.kind
    }
}

extension StallDigest: ReportSubset {
    package var startWall: String { start.wall }
}
