import StallmonReport

/// What the watchdog knows of a stall, handed to the writer thread: raw samples, no names yet.
struct StallEvidence: Sendable {
    /// The family of its event lines (`stall`, or a section's: `starvation`).
    var eventFamily: String { sections.lazy.compactMap(\.eventFamily).first ?? "stall" }

    var id: String
    var loopName: String
    var threadID: Int32
    var thresholdNanoseconds: UInt64
    /// When the stalled iteration began, CLOCK_MONOTONIC and CLOCK_REALTIME.
    var since: UInt64
    var sinceWall: UInt64
    /// Busy time so far (ongoing) or in all (final).
    var durationNanoseconds: UInt64
    /// True when `durationNanoseconds` comes from the loop's own clock reads.
    var durationExact: Bool
    var ongoing: Bool
    var elapsedAtDetection: UInt64
    var labelID: UInt32
    var samples: [RawSample]
    /// Where the thread's time went while watched, when /proc could tell.
    var threadFigures: StallReport.ThreadFigures? = nil
    var threadClass: StallClass = .unknown
    /// What withheld the CPU over the same span (the cgroup's limit, pressure, steal).
    var cpuContention: StallReport.CPUContention? = nil
    /// Whole-process freeze inside the iteration, excluded from `durationNanoseconds`.
    var frozenNanoseconds: UInt64 = 0
    var annotations: [String: String] = [:]
    /// The run-loop mode the iteration ran in when the watchdog noticed it (a `Looper`'s), nil for other loops.
    var mode: String? = nil
    /// For a Swift Concurrency worker: the job that held it.
    var job: StallReport.Job? = nil
    /// The label of an async job's task (`StallLabel`, with the request's trace ids), instead of a `Looper` label.
    var taskLabel: TaskLabel? = nil
    /// What the source alone knows, written by its own code (`StallSection`): a loop's phase, a starved pool's
    /// culprits (then `samples` are every culprit's).
    var sections: [any StallSection] = []
    /// What was done once the stall passed a hang limit (the report's `hang`). Part of the stall, not of one message:
    /// every ongoing report written after it (an interim, the one written at stop) replaces the hang's report on
    /// disk and must still say so. The final report has none (it replaces the hang's, as the README says).
    var hang: StallReport.Hang? = nil
}

/// A starved pool as the watchdog saw it: the culprits (one snapshot per busy worker, with its samples) and the
/// figures the report's `starvation` object is made of.
struct StarvationEvidence: Sendable {
    struct Culprit: Sendable {
        var snapshot: StallEvidence
        var heldThroughout: Bool
    }

    var culprits: [Culprit]
    var verdict: String
    var saturatedNanoseconds: UInt64
    var oldestWaitNanoseconds: UInt64
    /// Nil when the pool statistics are off (`pool_statistics = off`).
    var waitedJobs: UInt64?
    var jobsRun: UInt64?
    var workers: Int
    /// The workers the pool may run at once (`PoolWidth`), and the cgroup's CPU limit in CPUs when it has one.
    var poolWidth: Int? = nil
    var cpuLimit: Double? = nil
}
