/// Aggregation of one stall's samples, as pure functions over the report's frames and samples.
public struct CallTreeNode: Codable, Sendable, Equatable {
    /// Index into the report's `frames` of this function's most sampled frame (for file:line).
    public var frame: Int
    /// Samples whose stack passes through this node.
    public var samples: Int
    public var children: [CallTreeNode]
}

extension StallReport {
    /// The exact stack (frame indices, innermost first) most samples share, and how many share it; nil when no
    /// sample has a stack. Ties go to the stack seen first.
    public func mostCommonStack() -> (frames: [Int], count: Int)? {
        var counts: [[Int]: Int] = [:]
        var order: [[Int]] = []
        for sample in samples where !sample.frames.isEmpty {
            if counts[sample.frames] == nil { order.append(sample.frames) }
            counts[sample.frames, default: 0] += 1
        }
        guard let best = order.max(by: { counts[$0]! < counts[$1]! }) else { return nil }
        return (best, counts[best]!)
    }
}

/// The path most samples share, innermost frame first.
public struct HottestStack: Codable, Sendable, Equatable {
    /// Indices into `frames`, innermost first.
    public var frames: [Int]
    /// Samples that share the whole path.
    public var samples: Int
    /// Samples that count (successful captures of a busy loop).
    public var of: Int
}

enum StallAggregation {
    /// Call tree, hottest stack, top in-app frame (innermost in-app frame of the hottest stack) and signature of
    /// a stall's samples. Failed captures and samples of the loop idle in epoll are no evidence.
    static func analyze(frames: [StallReport.Frame], samples: [StallReport.Sample])
        -> (tree: [CallTreeNode], hottest: HottestStack?, topFrame: StallReport.FrameSummary?, signature: String?)
    {
        let evidence = samples.filter { $0.status == .ok && $0.idle != true && !$0.frames.isEmpty }.map(\.frames)
        let tree = callTree(evidence, frames: frames)
        let hottest = hottestStack(tree, total: evidence.count)
        var top: StallReport.FrameSummary?
        if let hottest, let innermostInApp = hottest.frames.first(where: { frames.indices.contains($0) && frames[$0].inApp }) {
            let frame = frames[innermostInApp]
            top = StallReport.FrameSummary(symbol: key(frame), module: frame.module, file: frame.file, line: frame.line)
        }
        return (tree, hottest, top, hottest.map { signature($0.frames, frames: frames) })
    }

    /// The function a frame belongs to: its symbol, or module+offset when it has none. Addresses play no part,
    /// so the key is the same across runs and ASLR.
    static func key(_ frame: StallReport.Frame) -> String {
        frame.symbol ?? "\(frame.module.map { $0.split(separator: "/").last.map(String.init) ?? $0 } ?? "?")+\(frame.offset ?? "?")"
    }

    /// A sample of the loop waiting in epoll (the iteration ended just before the capture) is no evidence of a
    /// stall.
    static func isIdle(_ frames: [Int], in table: [StallReport.Frame]) -> Bool {
        frames.prefix(8).contains { index in
            guard table.indices.contains(index), let symbol = table[index].symbol else { return false }
            return symbol.contains("Looper.(waitForEvents") || symbol.contains("Looper.waitForEvents")
                || symbol == "cstallmon_epoll_wait"
        }
    }

    /// Merges stacks (innermost first) into a tree rooted at the outermost frames.
    static func callTree(_ stacks: [[Int]], frames table: [StallReport.Frame]) -> [CallTreeNode] {
        final class Node {
            var counts: [Int: Int] = [:]  // frame index → samples, to pick the representative frame
            var samples = 0
            var children: [String: Node] = [:]
            var order: [String] = []
        }
        let root = Node()
        for stack in stacks {
            var node = root
            for index in stack.reversed() where table.indices.contains(index) {
                let name = key(table[index])
                let child: Node
                if let existing = node.children[name] {
                    child = existing
                } else {
                    child = Node()
                    node.children[name] = child
                    node.order.append(name)
                }
                child.samples += 1
                child.counts[index, default: 0] += 1
                node = child
            }
        }
        func convert(_ node: Node) -> [CallTreeNode] {
            node.order.map { name in
                let child = node.children[name]!
                let frame = child.counts.max { ($0.value, -$0.key) < ($1.value, -$1.key) }!.key
                return CallTreeNode(frame: frame, samples: child.samples, children: convert(child))
                    }.sorted { $0.samples > $1.samples }
        }
        return convert(root)
    }

    /// Follows the heaviest child from the outermost frame down while more than half of all samples still agree
    /// (Tencent Matrix's "point stack"): the deepest frame most samples share.
    static func hottestStack(_ roots: [CallTreeNode], total: Int) -> HottestStack? {
        guard total > 0 else { return nil }
        var path: [Int] = []
        var samples = total
        var level = roots
        while let heaviest = level.first, heaviest.samples * 2 > total {
            path.append(heaviest.frame)
            samples = heaviest.samples
            level = heaviest.children
        }
        guard !path.isEmpty else {
            // No majority even at the outermost frame: the heaviest branch as far as it goes alone.
            guard var node = roots.first else { return nil }
            path.append(node.frame)
            samples = node.samples
            while let next = node.children.first, next.samples == node.samples {
                path.append(next.frame)
                node = next
            }
            return HottestStack(frames: path.reversed(), samples: samples, of: total)
        }
        return HottestStack(frames: path.reversed(), samples: samples, of: total)
    }

    /// A stable id for "this kind of stall": FNV-1a 64 of the function keys of the hottest stack's innermost in-app
    /// frames (up to 5), or of its innermost frames when none is in-app. 16 hex digits.
    static func signature(_ stack: [Int], frames table: [StallReport.Frame]) -> String {
        let valid = stack.filter { table.indices.contains($0) }
        var chosen = valid.filter { table[$0].inApp }
        if chosen.isEmpty { chosen = valid }
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for index in chosen.prefix(5) {
            for byte in key(table[index]).utf8 {
                hash ^= UInt64(byte)
                hash = hash &* 0x0000_0100_0000_01B3
            }
            hash ^= 0x0A
            hash = hash &* 0x0000_0100_0000_01B3
        }
        let digits = String(hash, radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }
}

/// At most `limit` full reports per signature per `window`; further stalls are only counted.
struct SignatureRateLimiter: Sendable {
    let limit: Int
    let window: UInt64
    private var written: [String: [UInt64]] = [:]
    private var suppressed: [String: Int] = [:]

    init(limit: Int, window: UInt64) {
        self.limit = limit
        self.window = window
    }

    /// Whether a stall with `signature` at `now` gets a full report. When it does, returns how many stalls of the
    /// signature were suppressed since the previous full one.
    mutating func admit(_ signature: String, now: UInt64) -> (write: Bool, suppressedBefore: Int) {
        var times = (written[signature] ?? []).filter { now < $0 || now - $0 < window }
        defer { written[signature] = times }
        guard times.count < limit else {
            suppressed[signature, default: 0] += 1
            return (false, 0)
        }
        times.append(now)
        let before = suppressed.removeValue(forKey: signature) ?? 0
        if written.count > 10_000 { written = written.filter { !$0.value.isEmpty } }
        return (true, before)
    }
}
