/// The decision of `StarvationTracker`, pass by pass, with no thread, clock or worker in it: when to send the canary
/// (a tiny work item on the pool's medium-priority queue), when a starvation begins (the canary waited the
/// threshold while the queue's workers were all busy), when its culprits are sampled, and when it ends (the canary
/// began, and the jobs queued behind it had a moment to begin too).
struct StarvationDecision {
    /// The latest canary, as `cstallmon_concurrency_canary` reads it.
    enum Canary: Equatable {
        /// None was ever sent.
        case none
        /// Sent at `sent`, waiting for a worker.
        case waiting(sent: UInt64)
        /// Sent at `sent`, begun on a worker at `started`.
        case ran(sent: UInt64, started: UInt64)
    }

    /// What the tracker does in this pass.
    enum Action: Equatable {
        case sendCanary
        /// A starvation begins: the canary sent at `canarySent` still waits, a threshold later.
        case begin(canarySent: UInt64)
        /// Sample every culprit whose job still runs.
        case sampleCulprits
        /// The starvation is over: the canary began at `canaryStarted`.
        case finish(canaryStarted: UInt64)
    }

    private struct Starvation {
        var nextSampleAt: UInt64
        /// When the canary began: the saturation is over; the finish waits a moment for the jobs queued behind the
        /// canary to begin, so their waits are counted.
        var canaryStarted: UInt64?
    }

    let threshold: UInt64
    let sampleInterval: UInt64
    private var starvation: Starvation?

    init(threshold: UInt64, sampleInterval: UInt64) {
        self.threshold = threshold
        self.sampleInterval = sampleInterval
    }

    /// A starvation is in progress (begun, not finished).
    var isStarving: Bool { starvation != nil }

    /// The starvation in progress is still saturated: its canary has not been seen to begin.
    var isSaturated: Bool { starvation != nil && starvation?.canaryStarted == nil }

    /// One pass at `now`: `saturated` when as many medium-priority jobs run as the queue has workers. Returns what
    /// to do now and when the next pass is wanted.
    mutating func pass(now: UInt64, saturated: Bool, canary: Canary) -> (action: Action?, wakeAt: UInt64) {
        guard var current = starvation else {
            switch canary {
            case .waiting(let sent) where saturated:
                if now &- sent < threshold { return (nil, sent + threshold) }
                starvation = Starvation(nextSampleAt: now + sampleInterval)
                return (.begin(canarySent: sent), now + sampleInterval)
            case .none where saturated, .ran where saturated:
                return (.sendCanary, now + min(threshold / 4, 10_000_000))
            default:
                return (nil, now + StallDetector.Configuration.idlePoll(threshold: threshold))
            }
        }
        if case .ran(_, let started) = canary, current.canaryStarted == nil { current.canaryStarted = started }
        if let ended = current.canaryStarted {
            starvation = current
            let drained = ended + min(threshold / 4, 25_000_000)
            guard now >= drained else { return (nil, drained) }
            starvation = nil
            return (.finish(canaryStarted: ended), now + StallDetector.Configuration.idlePoll(threshold: threshold))
        }
        guard now >= current.nextSampleAt else { return (nil, current.nextSampleAt) }
        current.nextSampleAt = now + sampleInterval
        starvation = current
        return (.sampleCulprits, current.nextSampleAt)
    }

    /// The watch stops: a starvation in progress is over (written as ongoing). Returns whether one was.
    mutating func stop() -> Bool {
        defer { starvation = nil }
        return starvation != nil
    }
}
