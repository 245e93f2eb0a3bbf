/// Intervals during which the whole process did not run (SIGSTOP, a debugger, a VM or container freeze): the
/// watchdog saw its own sleep overrun without having waited for a CPU. Stall durations exclude them.
struct FreezeTracker: Sendable {
    private(set) var intervals: [(start: UInt64, end: UInt64)] = []
    private(set) var count = 0
    private(set) var totalNanoseconds: UInt64 = 0

    /// Records that the watchdog meant to wake at `expected` but ran only at `actual`, its run delay having grown by
    /// `runDelayGrowth` meanwhile. An overrun of at least `minimum` not explained by waiting for a CPU is a freeze.
    /// Returns true when it recorded one.
    @discardableResult
    mutating func observeWake(expected: UInt64, actual: UInt64, runDelayGrowth: UInt64, minimum: UInt64) -> Bool {
        guard actual > expected else { return false }
        let overrun = actual - expected
        guard overrun >= minimum, runDelayGrowth < overrun / 2 else { return false }
        intervals.append((expected, actual))
        if intervals.count > 64 { intervals.removeFirst(intervals.count - 64) }
        count += 1
        totalNanoseconds += overrun
        return true
    }

    /// Frozen time inside [start, end].
    func overlap(start: UInt64, end: UInt64) -> UInt64 {
        intervals.reduce(0) { sum, interval in
            let low = max(start, interval.start)
            let high = min(end, interval.end)
            return high > low ? sum + (high - low) : sum
        }
    }
}
