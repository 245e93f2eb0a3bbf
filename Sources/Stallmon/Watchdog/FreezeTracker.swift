/// Intervals during which the whole process did not run (SIGSTOP, a debugger, a VM or container freeze): the
/// watchdog saw a gap across which no thread of the process ran (`FreezeEvidence`). Stall durations exclude them.
struct FreezeTracker: Sendable {
    private(set) var intervals: [(start: UInt64, end: UInt64)] = []
    private(set) var count = 0
    private(set) var totalNanoseconds: UInt64 = 0

    /// Records a freeze over [start, end] (judged by `FreezeEvidence`).
    mutating func record(start: UInt64, end: UInt64) {
        guard end > start else { return }
        intervals.append((start, end))
        if intervals.count > 64 { intervals.removeFirst(intervals.count - 64) }
        count += 1
        totalNanoseconds &+= end - start
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
