import StallmonReport

/// The samples of many stall reports as the tables a profile is made of (strings, functions, locations, mappings,
/// stacks) and one weighted sample per stall and distinct stack: what pprof (`StallPprof`) and OTLP profiles
/// (`StallOTLPProfiles`) both carry, built once.
///
/// The weights make a flame graph of *time lost to stalls*. A stall's duration is shared among the stacks of its
/// usable samples (captured, not idle, with frames) in proportion to how many samples each has, in nanoseconds that
/// add up to the duration exactly; a stall with none is one sample of the pseudo-function `[no stack captured]`, so
/// that the profile's total is the stalls' total. Its `stalls` count is 1 on its hottest stack (the most samples;
/// the first of a tie), 0 on the others: the counts add up to the number of stalls.
package struct StallStacks: Sendable {
    /// A function as profiles name it: indices into `strings`.
    package struct Function: Hashable, Sendable {
        package var name: Int
        /// The symbol as the report has it (the demangler's, with an async function's partial-function prefix).
        package var systemName: Int
        package var file: Int
    }

    package struct Line: Hashable, Sendable {
        /// Index into `functions`.
        package var function: Int
        package var line: Int64
    }

    /// One address of a stack, with the functions inlined at it: `lines[0]` is the innermost (an inlined
    /// function), the last the physical frame they were inlined into.
    package struct Location: Hashable, Sendable {
        /// Index into `mappings`, or nil when the frame named no module.
        package var mapping: Int?
        /// The mapping's start plus the frame's offset in its module (the offset alone without a mapping).
        package var address: UInt64
        package var lines: [Line]
    }

    /// A module, placed at a window of its own: reports carry module offsets, not addresses (ASLR), so each module
    /// gets `[index << 40, (index + 1) << 40)` and its locations the start plus their offset.
    package struct Mapping: Hashable, Sendable {
        package var file: Int
        package var buildID: Int
        package var start: UInt64
        package var limit: UInt64
    }

    /// What a sample is filtered and grouped by: indices into `strings`.
    package struct Label: Hashable, Sendable {
        package var key: Int
        package var value: Int
    }

    package struct Sample: Sendable {
        /// Index into `stacks`.
        package var stack: Int
        package var stalls: Int64
        package var nanoseconds: Int64
        package var labels: [Label]
        /// The stall's request, when its scope was traced (lowercase hex, as the report has them).
        package var traceID: String?
        package var spanID: String?
        /// When the stall began, nanoseconds since the Unix epoch (nil when the report's time did not parse).
        package var start: UInt64?
    }

    /// `strings[0]` is "", as both formats require.
    package private(set) var strings: [String] = [""]
    package private(set) var functions: [Function] = []
    package private(set) var locations: [Location] = []
    package private(set) var mappings: [Mapping] = []
    /// Indices into `locations`, the innermost first.
    package private(set) var stacks: [[Int]] = []
    package private(set) var samples: [Sample] = []
    /// The earliest stall's start and the latest stall's end, epoch nanoseconds.
    package private(set) var earliestStart: UInt64?
    package private(set) var latestEnd: UInt64?
    /// Stalls added.
    package private(set) var stalls = 0

    private var stringIndex: [String: Int] = ["": 0]
    private var functionIndex: [Function: Int] = [:]
    private var locationIndex: [Location: Int] = [:]
    private var mappingIndex: [MappingKey: Int] = [:]

    private struct MappingKey: Hashable {
        var module: String
        var buildID: String
    }
    private var stackIndex: [[Int]: Int] = [:]
    /// The location of each frame met alone (not inlined, nothing inlined into it): a cache of `location(of:in:)`.
    private var locationOfFrame: [Stall.Frame: Int] = [:]

    /// The labels' keys, as profile stores show them.
    package enum LabelKey {
        package static let loop = "loop"
        package static let stallClass = "class"
        package static let label = "label"
        package static let signature = "signature"
        package static let buildID = "build_id"
        package static let spanID = "span_id"
    }

    /// The pseudo-function of a stall with no usable sample.
    package static let noStack = "[no stack captured]"
    /// Appended to an async function's name in its frame of an await chain: it was suspended awaiting the frame
    /// before it, not running.
    package static let asyncSuffix = " [async]"

    package init() {}

    /// What a profile reads of a report: the timeline's entry (which has the summary's digest), and of its samples
    /// and frames the members a stack is made of; decoded alone (`ReportReader.decodeSubset`), without images, call
    /// tree or figures, and without a frame's address or a sample's other members.
    package struct Stall: ReportSubset {
        package var entry: StallTimeline.Entry
        package var samples: [Sample]
        package var frames: [Frame]

        /// What a stack is made of of a report's sample.
        package struct Sample: Decodable, Sendable, SkimmedDecodable {
            package var status: CaptureStatus
            package var frames: [Int]
            package var idle: Bool?

            /// Captured, not idle, with frames: a stack a stall's time is shared among.
            var isUsable: Bool { status == .ok && idle != true && !frames.isEmpty }

            init(_ sample: StallReport.Sample) {
                status = sample.status
                frames = sample.frames
                idle = sample.idle
            }

            private static let names: [StaticString] = ["status", "frames", "idle"]

            package init(skimming object: SkimmedJSONDecoder.Object) throws {
                var status: CaptureStatus?
                var frames: [Int]?
                var idle: Bool?
                try object.forEachMember(named: Self.names) { index, value in
                    switch index {
                    case 0: status = CaptureStatus(rawValue: try value.string())
                        if status == nil { throw SkimmedJSONDecoder.Unsupported() }
                    case 1: frames = try value.integers()
                    default: idle = try value.optional { try $0.bool() }
                    }
                }
                guard let status, let frames else { throw SkimmedJSONDecoder.Unsupported() }
                self.status = status
                self.frames = frames
                self.idle = idle
            }
        }

        /// What a location is made of of a report's frame.
        package struct Frame: Decodable, Hashable, Sendable, SkimmedDecodable {
            package var module: String?
            package var buildId: String?
            package var offset: String?
            package var symbol: String?
            package var file: String?
            package var line: Int?
            package var inlined: Bool?
            package var async: Bool?

            init(_ frame: StallReport.Frame) {
                module = frame.module
                buildId = frame.buildId
                offset = frame.offset
                symbol = frame.symbol
                file = frame.file
                line = frame.line
                inlined = frame.inlined
                async = frame.async
            }

            /// `StallReport.Frame.functionKey`.
            var functionKey: String {
                StallReport.Frame.functionKey(symbol: symbol, module: module, offset: offset)
            }

            private static let names: [StaticString] = [
                "module", "buildId", "offset", "symbol", "file", "line", "inlined", "async",
            ]

            package init(skimming object: SkimmedJSONDecoder.Object) throws {
                var module, buildId, offset, symbol, file: String?
                var line: Int?
                var inlined, async: Bool?
                try object.forEachMember(named: Self.names) { index, value in
                    switch index {
                    case 0: module = try value.optional { try $0.string() }
                    case 1: buildId = try value.optional { try $0.string() }
                    case 2: offset = try value.optional { try $0.string() }
                    case 3: symbol = try value.optional { try $0.string() }
                    case 4: file = try value.optional { try $0.string() }
                    case 5: line = try value.optional { try $0.integer() }
                    case 6: inlined = try value.optional { try $0.bool() }
                    default: async = try value.optional { try $0.bool() }
                    }
                }
                (self.module, self.buildId, self.offset, self.symbol) = (module, buildId, offset, symbol)
                (self.file, self.line, self.inlined, self.async) = (file, line, inlined, async)
            }
        }

        private enum CodingKeys: String, CodingKey {
            case samples, frames
        }

        package var schema: String { entry.schema }
        package var startWall: String { entry.startWall }

        package init(from decoder: any Decoder) throws {
            entry = try StallTimeline.Entry(from: decoder)
            let container = try decoder.container(keyedBy: CodingKeys.self)
            samples = try container.decode([Sample].self, forKey: .samples)
            frames = try container.decode([Frame].self, forKey: .frames)
        }

        package init(_ report: StallReport) {
            entry = StallTimeline.Entry(report)
            samples = report.samples.map(Sample.init)
            frames = report.frames.map(Frame.init)
        }
    }

    /// Adds `report`'s stall.
    package mutating func add(_ report: StallReport) {
        add(Stall(report))
    }

    /// Adds a stall read as a `Stall`.
    package mutating func add(_ stall: Stall) {
        let report = stall.entry
        stalls += 1
        let start = WallTime.unixNanoseconds(report.digest.start.wall)
        let duration = Self.nanoseconds(milliseconds: report.digest.durationMs)
        if let start {
            earliestStart = min(earliestStart ?? start, start)
            let end = start &+ UInt64(duration)
            latestEnd = max(latestEnd ?? end, end)
        }
        let labels = labels(of: report)
        var locationOfGroup: [[Int]: Int] = [:]
        var countByStack: [Int: Int] = [:]
        var order: [Int] = []
        for sample in stall.samples where sample.isUsable {
            let stack = intern(stack: sample.frames, of: stall.frames, cache: &locationOfGroup)
            if countByStack[stack] == nil { order.append(stack) }
            countByStack[stack, default: 0] += 1
        }
        if order.isEmpty {
            let location = intern(location: Location(mapping: nil, address: 0, lines: [
                Line(function: intern(function: Self.noStack, systemName: Self.noStack, file: nil), line: 0),
            ]))
            order = [intern(stack: [location])]
            countByStack[order[0]] = 1
        }
        let total = order.reduce(0) { $0 + countByStack[$1]! }
        var hottest = order[0]
        for stack in order where countByStack[stack]! > countByStack[hottest]! { hottest = stack }
        var given: Int64 = 0
        for (position, stack) in order.enumerated() {
            // The last stack takes the rounding's remainder: the shares add up to the duration exactly.
            // In Double: a duration read from a file times a count can pass Int64; a share never exceeds it.
            let share = position == order.count - 1 ? duration - given
                : min(duration - given,
                      Int64(Double(duration) * Double(countByStack[stack]!) / Double(total)))
            given += share
            samples.append(Sample(stack: stack, stalls: stack == hottest ? 1 : 0, nanoseconds: share, labels: labels,
                                  traceID: report.traceId, spanID: report.spanId, start: start))
        }
    }

    /// Adds the stalls `other` holds, as if each had been added here after the ones already here: the tables come
    /// out the same, entry for entry, as adding the stalls one by one (what lets workers each fold a run of reports
    /// and the runs be merged in order).
    package mutating func merge(_ other: StallStacks) {
        let strings = other.strings.map { intern($0) }
        let mappings = other.mappings.map { mapping in
            intern(mapping: other.strings[mapping.file], buildID: other.strings[mapping.buildID])
        }
        let functions = other.functions.map { function in
            intern(function: Function(name: strings[function.name], systemName: strings[function.systemName],
                                      file: strings[function.file]))
        }
        let locations = other.locations.map { location -> Int in
            var merged = location
            merged.mapping = location.mapping.map { mappings[$0] }
            // Addresses are their module's window plus an offset: the window moves with the module's index.
            let otherBase = location.mapping.map { other.mappings[$0].start } ?? 0
            let base = merged.mapping.map { self.mappings[$0].start } ?? 0
            merged.address = location.address &- otherBase &+ base
            merged.lines = location.lines.map { Line(function: functions[$0.function], line: $0.line) }
            return intern(location: merged)
        }
        let stacks = other.stacks.map { stack in intern(stack: stack.map { locations[$0] }) }
        for var sample in other.samples {
            sample.stack = stacks[sample.stack]
            sample.labels = sample.labels.map { Label(key: strings[$0.key], value: strings[$0.value]) }
            samples.append(sample)
        }
        if let start = other.earliestStart { earliestStart = min(earliestStart ?? start, start) }
        if let end = other.latestEnd { latestEnd = max(latestEnd ?? end, end) }
        stalls += other.stalls
    }

    /// `milliseconds` as whole nanoseconds, 0 for a negative or NaN value, saturated where Int64 ends (a report's
    /// figure is outside input, and a conversion that overflows would trap).
    static func nanoseconds(milliseconds: Double) -> Int64 {
        let value = (milliseconds * 1e6).rounded()
        guard value > 0 else { return 0 }
        return value < 9.2e18 ? Int64(value) : Int64.max
    }

    private mutating func labels(of report: StallTimeline.Entry) -> [Label] {
        var labels: [Label] = []
        func add(_ key: String, _ value: String?) {
            guard let value, !value.isEmpty else { return }
            labels.append(Label(key: intern(key), value: intern(value)))
        }
        add(LabelKey.loop, report.digest.loop)
        add(LabelKey.stallClass, report.digest.stallClass?.rawValue)
        add(LabelKey.label, report.label)
        add(LabelKey.signature, report.digest.signature)
        add(LabelKey.buildID, report.process.buildId)
        return labels
    }

    /// A sample's frames (indices into the report's `frames`, innermost first) as a stack of locations: each run
    /// of inlined frames joins the physical frame after it in one location.
    private mutating func intern(stack indices: [Int], of frames: [Stall.Frame], cache: inout [[Int]: Int])
        -> Int {
        var stack: [Int] = []
        var group: [Int] = []
        for index in indices where frames.indices.contains(index) {
            group.append(index)
            if frames[index].inlined == true { continue }
            stack.append(location(of: group, in: frames, cache: &cache))
            group.removeAll(keepingCapacity: true)
        }
        // A truncated stack can end inside an inlined run: its frames still make a location.
        if !group.isEmpty { stack.append(location(of: group, in: frames, cache: &cache)) }
        return intern(stack: stack)
    }

    private mutating func location(of group: [Int], in frames: [Stall.Frame], cache: inout [[Int]: Int]) -> Int {
        if let known = cache[group] { return known }
        // A frame not inlined into another is a location of its own, the same in every report that has it: found
        // with one lookup instead of its module's, function's and location's.
        if group.count == 1, let known = locationOfFrame[frames[group[0]]] {
            cache[group] = known
            return known
        }
        let physical = frames[group[group.count - 1]]
        var mapping: Int?
        if let module = physical.module { mapping = intern(mapping: module, buildID: physical.buildId) }
        let offset = physical.offset.flatMap { UInt64($0.hasPrefix("0x") ? String($0.dropFirst(2)) : $0, radix: 16) }
            ?? 0
        let lines = group.map { index -> Line in
            let frame = frames[index]
            var name = frame.functionKey
            if frame.async == true { name = StallReport.Frame.withoutPartialFunctionPrefix(name) + Self.asyncSuffix }
            return Line(function: intern(function: name, systemName: frame.functionKey, file: frame.file),
                        line: Int64(frame.line ?? 0))
        }
        let base = mapping.map { mappings[$0].start } ?? 0
        let interned = intern(location: Location(mapping: mapping, address: base &+ offset, lines: lines))
        cache[group] = interned
        if group.count == 1 { locationOfFrame[physical] = interned }
        return interned
    }

    /// `string`'s index in `strings`, added when new (the formats' own strings: sample types, label keys).
    package mutating func intern(_ string: String) -> Int {
        if let known = stringIndex[string] { return known }
        strings.append(string)
        stringIndex[string] = strings.count - 1
        return strings.count - 1
    }

    private mutating func intern(function name: String, systemName: String, file: String?) -> Int {
        let nameIndex = intern(name)
        // Most functions are named as their symbol: one lookup for both.
        let systemIndex = systemName == name ? nameIndex : intern(systemName)
        return intern(function: Function(name: nameIndex, systemName: systemIndex, file: intern(file ?? "")))
    }

    private mutating func intern(function: Function) -> Int {
        if let known = functionIndex[function] { return known }
        functions.append(function)
        functionIndex[function] = functions.count - 1
        return functions.count - 1
    }

    private mutating func intern(location: Location) -> Int {
        if let known = locationIndex[location] { return known }
        locations.append(location)
        locationIndex[location] = locations.count - 1
        return locations.count - 1
    }

    private mutating func intern(mapping module: String, buildID: String?) -> Int {
        let key = MappingKey(module: module, buildID: buildID ?? "")
        if let known = mappingIndex[key] { return known }
        // Windows of 2^40 bytes: 2^24 modules before they wrap, which no process has.
        let start = UInt64(truncatingIfNeeded: mappings.count + 1) &<< 40
        mappings.append(Mapping(file: intern(module), buildID: intern(buildID ?? ""), start: start,
                                limit: start &+ (1 << 40)))
        mappingIndex[key] = mappings.count - 1
        return mappings.count - 1
    }

    private mutating func intern(stack: [Int]) -> Int {
        if let known = stackIndex[stack] { return known }
        stacks.append(stack)
        stackIndex[stack] = stacks.count - 1
        return stacks.count - 1
    }
}
