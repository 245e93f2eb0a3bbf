/// The path most samples share, innermost frame first.
public struct HottestStack: Codable, Sendable, Equatable {
    /// Indices into `frames`, innermost first.
    public var frames: [Int]
    /// Samples that share the whole path.
    public var samples: Int
    /// Samples that count (successful captures of a busy loop).
    public var of: Int

    package init(frames: [Int], samples: Int, of: Int) {
        self.frames = frames
        self.samples = samples
        self.of = of
    }
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

/// Aggregation of one stall's samples, as pure functions over the report's frames and samples.
public struct CallTreeNode: Codable, Sendable, Equatable {
    /// Index into the report's `frames` of this function's most sampled frame (for file:line).
    public var frame: Int
    /// Samples whose stack passes through this node.
    public var samples: Int
    public var children: [CallTreeNode]

    package init(frame: Int, samples: Int, children: [CallTreeNode]) {
        self.frame = frame
        self.samples = samples
        self.children = children
    }
}
