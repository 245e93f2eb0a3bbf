import StallmonReport

enum StallClassifier {
    /// Splits `wall` nanoseconds of a stall into on-CPU, waiting for a CPU, and the rest (sleeping or blocked),
    /// and names the largest share.
    static func classify(cpu: UInt64, runDelay: UInt64, wall: UInt64) -> StallClass {
        guard wall > 0 else { return .unknown }
        let sleeping = wall > cpu + runDelay ? wall - cpu - runDelay : 0
        if cpu >= runDelay && cpu >= sleeping { return .cpu }
        if runDelay >= sleeping { return .starved }
        return .blocked
    }
}
