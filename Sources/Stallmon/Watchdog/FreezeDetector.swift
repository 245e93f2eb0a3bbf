import CStallmonLoopShims

/// Tells a whole-process freeze (SIGSTOP, a debugger, a VM or container pause) from the watchdog thread's own
/// lateness. Two gaps are judged: a wake-up much later than asked for, and a pass that took that long. Either is a
/// freeze only when the process as a whole did not run across it (`FreezeEvidence`): never from the watchdog's
/// lateness alone, and not at all when the evidence cannot be read. Owned by the watchdog thread.
struct FreezeDetector {
    private(set) var freezes = FreezeTracker()
    /// The shortest gap judged: a quarter of the smallest threshold watched, at least 10 ms.
    private var minimum: UInt64
    /// CLOCK_MONOTONIC, the process's progress and its thread count: injected so that the decisions can be tested
    /// without threads.
    private let clock: () -> UInt64
    private let progress: () -> ProcessProgress?
    private let threadCount: () -> Int?
    private let cpus: Int
    private var expectedWake: UInt64?
    /// When the latest sleep began (the end of the pass before it): a late wake-up's readings span from there.
    private var sleptAt: UInt64?
    private var progressBeforeSleep: ProcessProgress?
    private var progressAtTop: ProcessProgress?
    /// The latest verdict on a gap long enough to judge (tests read it).
    private(set) var lastVerdict: FreezeEvidence.Verdict?

    init(thresholdNanoseconds: UInt64, clock: @escaping () -> UInt64 = { cstallmon_monotonic_ns() },
         progress: @escaping () -> ProcessProgress? = { ProcessProgress.read() },
         threadCount: @escaping () -> Int? = { ProcessProgress.threadCount() },
         cpus: Int = ProcessProgress.onlineCPUs()) {
        minimum = Self.minimum(thresholdNanoseconds: thresholdNanoseconds)
        self.cpus = cpus
        self.clock = clock
        self.progress = progress
        self.threadCount = threadCount
        progressBeforeSleep = progress()
    }

    private static func minimum(thresholdNanoseconds: UInt64) -> UInt64 {
        max(10_000_000, thresholdNanoseconds / 4)
    }

    /// The smallest threshold among the sources watched now (they come and go).
    mutating func setThreshold(nanoseconds: UInt64) {
        minimum = Self.minimum(thresholdNanoseconds: nanoseconds)
    }

    /// At the top of a pass: the freeze's length when the wake-up at `now` was one.
    mutating func passBegins(now: UInt64) -> UInt64? {
        progressAtTop = progress()
        guard let expected = expectedWake else { return nil }
        return judge(expected: expected, actual: now, since: sleptAt ?? expected, before: progressBeforeSleep,
                     after: progressAtTop)
    }

    /// The pass watched nothing (no thread bound yet): the next wake-up is not judged.
    mutating func skipNextWake() {
        expectedWake = nil
    }

    /// At the end of a pass that began at `began` and sleeps until `wakeAt`: the freeze's length when the pass
    /// itself was one. A freeze can also land while this thread works rather than sleeps (more likely on a loaded
    /// machine, where it is often preempted mid-pass). A pass that waited on work of its own (a capture's handler,
    /// up to `capture_timeout_ms`; the report writer) is not judged: its length says nothing of a freeze.
    ///
    /// A pass shorter than the shortest gap judged cannot have been one, and takes no reading of its own: the
    /// readings at its top stand for its end, and the next wake-up's window reaches back over the pass (its CPU is
    /// within the allowance of `cpus` × the window outside the gap). The evidence is three system calls that walk
    /// every thread of the process, the most of an idle pass's cost: one reading a pass, not two.
    mutating func passEnds(began: UInt64, waitedOnItsOwnWork: Bool, wakeAt: UInt64) -> UInt64? {
        var passEnd = clock()
        var frozen: UInt64?
        if passEnd > began, passEnd - began >= minimum {
            let atEnd = progress()
            passEnd = max(passEnd, clock())
            if !waitedOnItsOwnWork {
                frozen = judge(expected: began, actual: passEnd, since: began, before: progressAtTop, after: atEnd)
            }
            progressBeforeSleep = atEnd
            sleptAt = passEnd
        } else {
            progressBeforeSleep = progressAtTop
            sleptAt = began
        }
        expectedWake = max(wakeAt, passEnd)
        return frozen
    }

    /// The readings `before` were taken at `since`, `after` at `actual`.
    private mutating func judge(expected: UInt64, actual: UInt64, since: UInt64, before: ProcessProgress?,
                                after: ProcessProgress?) -> UInt64? {
        // The thread count is read only for a gap long enough to judge: most passes pay nothing for it.
        guard actual > expected, actual - expected >= minimum else { return nil }
        let verdict = FreezeEvidence.judge(expected: expected, actual: actual, window: actual &- min(since, actual),
                                           before: before, after: after, threads: threadCount(), cpus: cpus,
                                           minimum: minimum)
        lastVerdict = verdict
        guard verdict == .frozen else { return nil }
        freezes.record(start: expected, end: actual)
        return actual - expected
    }
}
