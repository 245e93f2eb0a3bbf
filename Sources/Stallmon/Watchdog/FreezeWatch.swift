import CStallmonLoopShims

/// Tells a whole-process freeze (SIGSTOP, a VM or container pause) from the watchdog thread's own passes: a wake-up
/// much later than asked for without waiting for a CPU, or a pass that took that long while waiting neither for a
/// CPU nor on work of its own. Owned by one watchdog thread.
struct FreezeWatch {
    private(set) var freezes = FreezeTracker()
    private let minimum: UInt64
    /// CLOCK_MONOTONIC and this thread's run delay: injected so that the decisions can be tested without threads.
    private let clock: () -> UInt64
    private let ownRunDelay: () -> UInt64?
    private var expectedWake: UInt64?
    private var runDelayBeforeSleep: UInt64
    private var delayAtTop: UInt64?

    init(thresholdNanoseconds: UInt64, clock: @escaping () -> UInt64 = { cstallmon_monotonic_ns() },
         ownRunDelay: @escaping () -> UInt64? = { ThreadStats.ownRunDelay() }) {
        minimum = max(10_000_000, thresholdNanoseconds / 4)
        self.clock = clock
        self.ownRunDelay = ownRunDelay
        runDelayBeforeSleep = ownRunDelay() ?? 0
    }

    /// At the top of a pass: the freeze's length when the wake-up at `now` was one.
    mutating func passBegins(now: UInt64) -> UInt64? {
        delayAtTop = ownRunDelay()
        guard let expected = expectedWake else { return nil }
        let delayGrowth = (delayAtTop ?? runDelayBeforeSleep) &- runDelayBeforeSleep
        guard freezes.observeWake(expected: expected, actual: now, runDelayGrowth: delayGrowth, minimum: minimum) else {
            return nil
        }
        return now - expected
    }

    /// The pass watched nothing (no thread bound yet): the next wake-up is not judged.
    mutating func skipNextWake() {
        expectedWake = nil
    }

    /// At the end of a pass that began at `began` and sleeps until `wakeAt`: the freeze's length when the pass
    /// itself was one. A freeze can also land while this thread works rather than sleeps (more likely on a loaded
    /// machine, where it is often preempted mid-pass): the pass then takes as long as the freeze, without waiting
    /// for a CPU. But a pass also takes long, without waiting for a CPU, when it waits on work of its own: a capture's
    /// handler (up to `capture_timeout_ms` when the thread blocks the signal), the report writer making a hang's
    /// report durable. Such a pass (`waitedOnItsOwnWork`) is not judged: its length says nothing of a freeze.
    mutating func passEnds(began: UInt64, waitedOnItsOwnWork: Bool, wakeAt: UInt64) -> UInt64? {
        let delayAtEnd = ownRunDelay() ?? runDelayBeforeSleep
        let passEnd = clock()
        var frozen: UInt64?
        if !waitedOnItsOwnWork, let delayAtTop,
           freezes.observeWake(expected: began, actual: passEnd, runDelayGrowth: delayAtEnd &- delayAtTop,
                               minimum: minimum)
        {
            frozen = passEnd - began
        }
        runDelayBeforeSleep = delayAtEnd
        expectedWake = max(wakeAt, passEnd)
        return frozen
    }
}
