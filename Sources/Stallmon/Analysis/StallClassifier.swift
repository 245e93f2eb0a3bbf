import StallmonReport

enum StallClassifier {
    /// Splits `wall` nanoseconds of a stall into on-CPU, waiting for a CPU, and the rest (sleeping or blocked),
    /// and names the largest share. A wait for a CPU that the cgroup's CPU limit covers for at least half
    /// (`throttledWall`: the most wall time the limit can have withheld the CPU in the span, see
    /// `CPUContention.throttledWallBound`) is `throttled`; otherwise it is `starved`.
    static func classify(cpu: UInt64, runDelay: UInt64, wall: UInt64, throttledWall: UInt64? = nil) -> StallClass {
        guard wall > 0 else { return .unknown }
        let sleeping = wall > cpu + runDelay ? wall - cpu - runDelay : 0
        if cpu >= runDelay && cpu >= sleeping { return .cpu }
        guard runDelay >= sleeping else { return .blocked }
        if let throttledWall, min(throttledWall, runDelay) * 2 >= runDelay { return .throttled }
        return .starved
    }
}
