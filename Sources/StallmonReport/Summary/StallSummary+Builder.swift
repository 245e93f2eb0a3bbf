extension StallSummary {
    /// A summary folded report by report: what it keeps of each report is its duration and, in its group, its id and
    /// order (a hundred bytes or so), not its digest. Builders of runs of reports read apart (`ReportReader.fold`)
    /// merge into one.
    ///
    /// Where a summary takes a group's "first" member (its top frame when the longest has none, its signature and
    /// kind, the tie between its waits) or lists its ids, it goes by `Order`: the order the reports are given in, or
    /// for a directory, start time and then file name, as `ReportReader.sortedByStart` orders them.
    package struct Builder: Sendable {
        /// Where a report stands among the others: by `start`, then by `index`.
        package struct Order: Comparable, Sendable {
            package var start: String
            package var index: Int

            package init(start: String, index: Int) {
                self.start = start
                self.index = index
            }

            package static func < (left: Order, right: Order) -> Bool {
                (left.start, left.index) < (right.start, right.index)
            }
        }

        private struct Member: Sendable {
            var order: Order
            var id: String
            var durationMs: Double
        }

        private struct GroupSoFar: Sendable {
            var members: [Member] = []
            /// The longest member (the first of those as long), with what the group shows of it.
            var longest: (durationMs: Double, order: Order, path: String, topFrame: StallReport.FrameSummary?)?
            var firstWithTopFrame: (order: Order, topFrame: StallReport.FrameSummary)?
            /// The first member's signature and kind.
            var first: (order: Order, signature: String?, kind: String?)?
            var classVotes: [StallClass: Int] = [:]
            var anyClass = false
            /// Each main wait, with how many members waited on it and the first that did.
            var waits: [String: (count: Int, first: Order)] = [:]
            var suppressed = 0
            var loops: Set<String> = []
        }

        private var durations: [Double] = []
        private var ongoing = 0
        private var firstStart: String?
        private var lastStart: String?
        private var loops: Set<String> = []
        private var classCounts: [String: Int] = [:]
        private var suppressed = 0
        private var groups: [String: GroupSoFar] = [:]

        package init() {}

        /// Adds one report's digest; `path` is its file (a group's example is its longest stall's).
        package mutating func add(_ digest: StallDigest, path: String, order: Order) {
            durations.append(digest.durationMs)
            if digest.ongoing { ongoing += 1 }
            firstStart = min(firstStart ?? digest.start.wall, digest.start.wall)
            lastStart = max(lastStart ?? digest.start.wall, digest.start.wall)
            loops.insert(digest.loop)
            classCounts[(digest.stallClass ?? .unknown).rawValue, default: 0] += 1
            suppressed = StallSummary.saturatingAdd(suppressed, digest.suppressedBefore ?? 0)

            let key = digest.signature ?? ("frame:" + (digest.topFrame?.symbol ?? StallSummary.noInAppFrame))
            // In place: a copy taken out of the dictionary would copy the group's members at every report.
            Self.add(digest, path: path, order: order, to: &groups[key, default: GroupSoFar()])
        }

        private static func add(_ digest: StallDigest, path: String, order: Order, to group: inout GroupSoFar) {
            group.members.append(Member(order: order, id: digest.id, durationMs: digest.durationMs))
            if group.longest.map({ isLonger(digest.durationMs, order, than: $0.durationMs, $0.order) }) ?? true {
                group.longest = (digest.durationMs, order, path, digest.topFrame)
            }
            if let top = digest.topFrame, group.firstWithTopFrame.map({ order < $0.order }) ?? true {
                group.firstWithTopFrame = (order, top)
            }
            if group.first.map({ order < $0.order }) ?? true {
                group.first = (order, digest.signature, digest.kind)
            }
            group.classVotes[digest.stallClass ?? .unknown, default: 0] += 1
            if digest.stallClass != nil { group.anyClass = true }
            if let wait = digest.waitingOn?.first?.groupDescription {
                let known = group.waits[wait]
                group.waits[wait] = ((known?.count ?? 0) + 1, min(known?.first ?? order, order))
            }
            group.suppressed = StallSummary.saturatingAdd(group.suppressed, digest.suppressedBefore ?? 0)
            group.loops.insert(digest.loop)
        }

        /// Adds what `other` folded (reports read apart from this builder's).
        package mutating func merge(_ other: Builder) {
            durations += other.durations
            ongoing += other.ongoing
            if let start = other.firstStart { firstStart = min(firstStart ?? start, start) }
            if let start = other.lastStart { lastStart = max(lastStart ?? start, start) }
            loops.formUnion(other.loops)
            classCounts.merge(other.classCounts, uniquingKeysWith: +)
            suppressed = StallSummary.saturatingAdd(suppressed, other.suppressed)
            for (key, theirs) in other.groups {
                guard groups[key] != nil else {
                    groups[key] = theirs
                    continue
                }
                Self.merge(theirs, into: &groups[key]!)
            }
        }

        private static func merge(_ theirs: GroupSoFar, into group: inout GroupSoFar) {
            group.members += theirs.members
            if let longest = theirs.longest,
               group.longest.map({ isLonger(longest.durationMs, longest.order, than: $0.durationMs, $0.order) })
                ?? true {
                group.longest = longest
            }
            if let top = theirs.firstWithTopFrame, group.firstWithTopFrame.map({ top.order < $0.order }) ?? true {
                group.firstWithTopFrame = top
            }
            if let first = theirs.first, group.first.map({ first.order < $0.order }) ?? true {
                group.first = first
            }
            group.classVotes.merge(theirs.classVotes, uniquingKeysWith: +)
            group.anyClass = group.anyClass || theirs.anyClass
            group.waits.merge(theirs.waits) { mine, their in (mine.count + their.count, min(mine.first, their.first)) }
            group.suppressed = StallSummary.saturatingAdd(group.suppressed, theirs.suppressed)
            group.loops.formUnion(theirs.loops)
        }

        /// A group's longest stall is the first of the longest (as `max(by:)` picks it).
        private static func isLonger(_ duration: Double, _ order: Order, than other: Double, _ otherOrder: Order) -> Bool {
            duration > other || (duration == other && order < otherOrder)
        }

        /// The summary of every report added.
        package func summary(directory: String, unreadable: Int) -> StallSummary {
            let sorted = durations.sorted()
            let histogram = StallSummary.bucketEdges.enumerated().map { index, lower in
                let upper = index + 1 < StallSummary.bucketEdges.count ? StallSummary.bucketEdges[index + 1] : nil
                return Bucket(lowerMs: lower, upperMs: upper,
                              count: sorted.filter { $0 >= lower && (upper == nil || $0 < upper!) }.count)
            }
            let built = groups.values.map { group -> (group: Group, first: Order) in
                let members = group.members.sorted { $0.order < $1.order }
                let durations = members.map(\.durationMs).sorted()
                let majority = group.classVotes.max { ($0.value, $0.key.rawValue) < ($1.value, $1.key.rawValue) }?.key
                let top = group.longest?.topFrame ?? group.firstWithTopFrame?.topFrame
                let commonWait = group.waits.max { ($0.value.count, $1.value.first) < ($1.value.count, $0.value.first) }
                var summarized = Group(signature: group.first?.signature, stallClass: group.anyClass ? majority : nil,
                                       suppressed: group.suppressed, topFrame: top?.symbol ?? StallSummary.noInAppFrame,
                                       file: top?.file, line: top?.line, count: members.count,
                                       totalMs: durations.reduce(0, +), maxMs: durations.last ?? 0,
                                       p50Ms: StallSummary.percentile(durations, 0.5), loops: group.loops.sorted(),
                                       reportIds: members.map(\.id), example: group.longest?.path ?? "")
                summarized.waitingOn = commonWait?.key
                summarized.waitingOnCount = commonWait?.value.count
                summarized.kind = group.first?.kind
                return (summarized, members.first?.order ?? Order(start: "", index: 0))
            }
            // Most stalls first, then most time; groups alike in both by their first stall, so the order never
            // depends on a dictionary's.
            let groups = built.sorted { left, right in
                (left.group.count, left.group.totalMs) != (right.group.count, right.group.totalMs)
                    ? (left.group.count, left.group.totalMs) > (right.group.count, right.group.totalMs)
                    : left.first < right.first
            }.map(\.group)
            var summary = StallSummary(empty: directory, unreadable: unreadable)
            summary.stalls = durations.count
            summary.ongoing = ongoing
            summary.durationMs = sorted.isEmpty ? nil : Percentiles(
                p50: StallSummary.percentile(sorted, 0.50), p90: StallSummary.percentile(sorted, 0.90),
                p99: StallSummary.percentile(sorted, 0.99), max: sorted.last!, total: sorted.reduce(0, +))
            summary.firstStart = firstStart
            summary.lastStart = lastStart
            summary.loops = loops.sorted()
            summary.classes = classCounts
            summary.suppressed = suppressed
            summary.histogram = histogram
            summary.groups = groups
            return summary
        }
    }

    /// A summary of no report, filled in by `Builder`.
    fileprivate init(empty directory: String, unreadable: Int) {
        schema = Self.currentSchema
        self.directory = directory
        stalls = 0
        ongoing = 0
        self.unreadable = unreadable
        durationMs = nil
        firstStart = nil
        lastStart = nil
        loops = []
        classes = [:]
        suppressed = 0
        histogram = []
        groups = []
    }
}
