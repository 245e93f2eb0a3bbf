/// Where the watchdog's readings come from: the threads one monitor watches (a loop thread, the pool's workers), read
/// at each pass the source asks for. The process's one watchdog (`Watchdog`) owns what is the same for every source:
/// the freeze check, snapshot requests, the wait until the next pass; a source owns its threads' probes, their
/// `StallTracker`s, its capture slots and its statistics. Called on the watchdog thread, or under the watchdog's
/// lock for this source (`stop`, when its monitor stops), never by two threads at once.
protocol ProbeSource: AnyObject {
    /// What this source's threads are doing now, for a snapshot on demand, each busy one with a stack sample.
    /// `waitedOnItsOwnWork`: a capture was taken (it waits up to `capture_timeout_ms` for its handler).
    func snapshotParts() -> (parts: [SnapshotCoordinator.Part], waitedOnItsOwnWork: Bool)

    /// One pass at `now`: reads every watched thread's probe and steps its tracker.
    func pass(now: UInt64, freezes: FreezeTracker) -> ProbePass

    /// When the statistics export is next due (monotonic ns; 0 before the first); nil: this source exports none.
    var statisticsDue: UInt64? { get }

    /// Exports the statistics whose windows are over (swift-metrics, `loop.stats` / `pool.stats` lines), as of the
    /// latest pass.
    func exportStatistics(now: UInt64)

    /// The watchdog stops: a stall in progress is finished if it ends within a short grace, else written as ongoing.
    func stop(freezes: FreezeTracker)
}

/// What one pass of a `ProbeSource` found.
struct ProbePass {
    /// When the source wants its next pass.
    var wakeAt: UInt64
    /// The pass waited on work of its own (a capture's handler, the writer): its length is no sign of a freeze.
    var waitedOnItsOwnWork = false
    /// Nothing was watched (the loop thread has not bound itself yet): no statistics, and the wake-up is not judged.
    var watchedNothing = false
}
