import CStallmonLoopShims
import Synchronization

/// The monitor's footprint on the loop thread: the loop (a `Looper` calls it directly, StallmonNIO from its
/// selector-wait hook) stores the busy interval of each iteration into atomics that the watchdog reads from its own
/// thread, and counts every iteration's busy time into a histogram.
///
/// Per iteration the loop pays a few relaxed/release atomic stores and no clock read of its own (the loop hands
/// the probe the timestamp it already took). No locks, allocation, syscalls or I/O.
///
/// Protocol: `sequence` is odd while an iteration is busy, even while the loop waits; iteration number =
/// (sequence + 1) / 2. `busySince` belongs to the current odd sequence, read seqlock-style. When an iteration
/// ends having lasted at least the threshold, the loop also publishes it in the `long*` record (its own seqlock), so
/// the watchdog learns the exact end time even if the loop has moved on by the time it looks.
package final class LoopProbe: Sendable {
    /// What the watchdog reads: the loop waits, or an iteration has been busy since a time.
    package enum Reading: Equatable, Sendable {
        case idle(completedIterations: UInt64)
        case busy(iteration: UInt64, since: UInt64)
    }

    package let thresholdNanoseconds: UInt64

    private let sequence = Atomic<UInt64>(0)
    private let busySince = Atomic<UInt64>(0)
    private let longSequence = Atomic<UInt64>(0)
    private let longIteration = Atomic<UInt64>(0)
    private let longBegin = Atomic<UInt64>(0)
    private let longEnd = Atomic<UInt64>(0)
    /// Iterations that lasted at least the threshold, counted by the loop itself (ground truth for the watchdog).
    package let longIterationCount = Atomic<UInt64>(0)
    /// Loop-thread-only: the current interval was opened by afterWaiting, so the next beforeTimers continues it.
    private let openedByWake = Atomic<Bool>(false)
    /// Busy time of every finished iteration; written by the loop thread only.
    private let busyTotal = Atomic<UInt64>(0)
    /// Every finished iteration's busy time.
    package let histogram = BusyHistogram()
    /// When the monitor started (CLOCK_MONOTONIC ns; 0 before), the start of the utilization's wall time.
    package let monitoringSince = Atomic<UInt64>(0)

    package init(thresholdNanoseconds: UInt64) {
        self.thresholdNanoseconds = thresholdNanoseconds
    }

    // MARK: - Loop thread

    /// afterWaiting: the loop woke up; everything until beforeWaiting is busy.
    @inline(__always)
    package func loopWoke(at now: UInt64) {
        endIteration(at: now)
        beginIteration(at: now)
        openedByWake.store(true, ordering: .relaxed)
    }

    /// beforeTimers: a new pass. It continues the interval opened by the wake-up, or, when the loop polled instead
    /// of sleeping, closes the previous pass and opens a new interval.
    @inline(__always)
    package func passBegins(at now: UInt64) {
        if openedByWake.load(ordering: .relaxed) {
            openedByWake.store(false, ordering: .relaxed)
            return
        }
        endIteration(at: now)
        beginIteration(at: now)
    }

    /// beforeWaiting / exit: the busy interval ends.
    @inline(__always)
    package func loopIdles(at now: UInt64) {
        openedByWake.store(false, ordering: .relaxed)
        endIteration(at: now)
    }

    @inline(__always)
    private func beginIteration(at now: UInt64) {
        // Only the loop thread writes `sequence`, so a plain release store does (no locked read-modify-write).
        let current = sequence.load(ordering: .relaxed)
        // Seqlock writer: `busySince` is written while `sequence` is even, so the previous odd → even store must be
        // visible before it, or a reader on a weakly ordered CPU could pair the old odd sequence with this new
        // start. A release fence pairs with the reader's acquire fence; on x86 it is only a compiler barrier.
        atomicMemoryFence(ordering: .releasing)
        busySince.store(now, ordering: .relaxed)
        sequence.store(current &+ 1, ordering: .releasing)  // even → odd
    }

    @inline(__always)
    private func endIteration(at now: UInt64) {
        let current = sequence.load(ordering: .relaxed)
        guard current & 1 == 1 else { return }
        let since = busySince.load(ordering: .relaxed)
        let busy = now >= since ? now &- since : 0
        if busy >= thresholdNanoseconds {
            publishLongIteration(iteration: (current + 1) / 2, begin: since, end: now)
        }
        histogram.record(busy)
        busyTotal.store(busyTotal.load(ordering: .relaxed) &+ busy, ordering: .relaxed)
        sequence.store(current &+ 1, ordering: .releasing)  // odd → even
    }

    private func publishLongIteration(iteration: UInt64, begin: UInt64, end: UInt64) {
        let version = longSequence.load(ordering: .relaxed)
        longSequence.store(version &+ 1, ordering: .relaxed)  // odd: being written
        atomicMemoryFence(ordering: .releasing)
        longIteration.store(iteration, ordering: .relaxed)
        longBegin.store(begin, ordering: .relaxed)
        longEnd.store(end, ordering: .relaxed)
        longSequence.store(version &+ 2, ordering: .releasing)
        longIterationCount.wrappingAdd(1, ordering: .relaxed)
    }

    // MARK: - Watchdog thread

    /// A consistent reading of the loop's state.
    package func read() -> Reading {
        while true {
            let before = sequence.load(ordering: .acquiring)
            let since = busySince.load(ordering: .relaxed)
            atomicMemoryFence(ordering: .acquiring)
            let after = sequence.load(ordering: .relaxed)
            guard before == after else { continue }
            if before & 1 == 0 { return .idle(completedIterations: before / 2) }
            return .busy(iteration: (before + 1) / 2, since: since)
        }
    }

    /// The iteration in progress (or the next one while the loop waits).
    package func currentIteration() -> UInt64 {
        (sequence.load(ordering: .relaxed) + 1) / 2
    }

    /// The exact interval of `iteration` if the loop recorded it as long and has not overwritten it since.
    package func longIterationRecord(_ iteration: UInt64) -> (begin: UInt64, end: UInt64)? {
        for _ in 0..<1000 {
            let before = longSequence.load(ordering: .acquiring)
            if before & 1 == 1 { continue }
            let recorded = longIteration.load(ordering: .relaxed)
            let begin = longBegin.load(ordering: .relaxed)
            let end = longEnd.load(ordering: .relaxed)
            atomicMemoryFence(ordering: .acquiring)
            guard longSequence.load(ordering: .relaxed) == before else { continue }
            return recorded == iteration ? (begin, end) : nil
        }
        return nil
    }

    /// Finished iterations and the busy time of all iterations up to `now`, the one in progress included.
    package func busyTime(at now: UInt64) -> (iterations: UInt64, busyNanoseconds: UInt64) {
        while true {
            let before = sequence.load(ordering: .acquiring)
            let total = busyTotal.load(ordering: .relaxed)
            let since = busySince.load(ordering: .relaxed)
            atomicMemoryFence(ordering: .acquiring)
            guard sequence.load(ordering: .relaxed) == before else { continue }
            let open = before & 1 == 1 && now > since ? now - since : 0
            return (before / 2, total &+ open)
        }
    }
}
