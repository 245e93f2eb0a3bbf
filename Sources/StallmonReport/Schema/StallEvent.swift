/// One line of the JSON-lines event log. Fields that do not apply to an event are omitted.
public struct StallEvent: Codable, Sendable, Equatable {
    /// Wall clock, ISO 8601 UTC with milliseconds.
    public var time: String
    /// `stall.begin`, `stall.interim`, `stall.end`, `loop.stats`, `pool.stats`, `process.frozen` or `monitor.error`.
    public var event: String
    public var id: String?
    public var loop: String?
    public var tid: Int32?
    public var thresholdMs: Double?
    /// For `stall.begin`: how long the iteration had been busy when the watchdog noticed.
    public var elapsedMs: Double?
    public var durationMs: Double?
    public var label: String?
    /// Swift Concurrency stalls and starvations: the W3C trace id of the task's traced `StallLabel` scope, as the
    /// report's.
    public var traceId: String?
    /// The W3C span id of that scope, as the report's.
    public var spanId: String?
    public var topFrame: String?
    public var samples: Int?
    /// Path of the report written for this event.
    public var report: String?
    public var count: Int?
    public var message: String?
    /// `cpu`, `blocked` or `starved` (JSON key `class`).
    public var stallClass: StallClass?
    public var signature: String?
    /// True on a `stall.end` whose report was not written because its signature hit the rate limit.
    public var suppressed: Bool?
    /// SwiftNIO event loops: `io` or `tasks`, as the report's `phase`.
    public var phase: String?
    /// `Looper` loops: the run-loop mode of the stalled iteration, as the report's `mode`.
    public var mode: String?
    /// Swift Concurrency stalls: the job that held the worker, as the report's `job`.
    public var job: StallReport.Job?
    /// `loop.stats`: the window the figures cover, in seconds (since the previous `loop.stats` of the loop).
    public var windowS: Double?
    /// `loop.stats`: iterations finished in the window.
    public var iterations: Int?
    /// `loop.stats`: busy time of those iterations, median, 90th and 99th percentile and largest (bucket
    /// midpoints, within 3.2 %).
    public var busyP50Ms: Double?
    public var busyP90Ms: Double?
    public var busyP99Ms: Double?
    public var busyMaxMs: Double?
    /// `loop.stats`: busy time ÷ wall time over the window, 0…1. `pool.stats`: the busy ratio, busy time ÷ (window ×
    /// threads that can run the class's jobs at once).
    public var utilization: Double?
    /// `pool.stats`: the priority band (`high`, `medium`, `low`, `background`, or `main` for the main actor).
    public var priority: String?
    /// `pool.stats`: jobs finished in the window.
    public var jobs: Int?
    /// `pool.stats`: run time of those jobs (tokio's poll duration), median, 90th and 99th percentile and largest.
    public var runP50Ms: Double?
    public var runP90Ms: Double?
    public var runP99Ms: Double?
    public var runMaxMs: Double?
    /// `pool.stats`: queue delay of those jobs, enqueued (or due) to begun (tokio's scheduled duration).
    public var delayP50Ms: Double?
    public var delayP90Ms: Double?
    public var delayP99Ms: Double?
    public var delayMaxMs: Double?
    /// `pool.stats`: jobs that ran for at least the threshold (tokio's slow polls).
    public var slowJobs: Int?
    /// `pool.stats`: jobs that waited for at least the threshold before they began (tokio's long delays).
    public var longDelays: Int?
    /// `pool.stats`: the pool's worker threads alive at the window's end.
    public var workers: Int?
    /// `pool.stats`: the workers the pool may run at once per priority, one per CPU the process may use
    /// (libdispatch reads the CPU affinity, not the CPU limit).
    public var poolWidth: Int?
    /// `loop.stats`, `pool.stats`: the cgroup's CPU limit in CPUs, and over the window its enforcement periods, the
    /// periods that ran out of quota and the time throttled (summed over CPUs); absent without a limit.
    public var cpuLimit: Double?
    public var periods: Int?
    public var throttledPeriods: Int?
    public var throttledMs: Double?
    /// `stall.hang`: what was done about a hung loop (`abort`, `watchdog`), see `StallReport.Hang`.
    public var action: String?

    enum CodingKeys: String, CodingKey {
        case time, event, id, loop, tid, thresholdMs, elapsedMs, durationMs, label, traceId, spanId, topFrame, samples
        case report, count
        case message
        case stallClass = "class"
        case signature, suppressed, phase, mode, job
        case windowS, iterations, busyP50Ms, busyP90Ms, busyP99Ms, busyMaxMs, utilization
        case priority, jobs, runP50Ms, runP90Ms, runP99Ms, runMaxMs, delayP50Ms, delayP90Ms, delayP99Ms, delayMaxMs
        case slowJobs, longDelays, workers, action
        case poolWidth, cpuLimit, periods, throttledPeriods, throttledMs
    }

    public init(time: String, event: String) {
        self.time = time
        self.event = event
    }
}
