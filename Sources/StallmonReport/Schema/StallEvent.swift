/// One line of the JSON-lines event log. Fields that do not apply to an event are omitted.
public struct StallEvent: Codable, Sendable, Equatable {
    /// Wall clock, ISO 8601 UTC with milliseconds.
    public var time: String
    /// `stall.begin`, `stall.interim`, `stall.end`, `loop.stats`, `process.frozen` or `monitor.error`.
    public var event: String
    public var id: String?
    public var loop: String?
    public var tid: Int32?
    public var thresholdMs: Double?
    /// For `stall.begin`: how long the iteration had been busy when the watchdog noticed.
    public var elapsedMs: Double?
    public var durationMs: Double?
    public var label: String?
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
    /// `loop.stats`: busy time ÷ wall time over the window, 0…1.
    public var utilization: Double?

    enum CodingKeys: String, CodingKey {
        case time, event, id, loop, tid, thresholdMs, elapsedMs, durationMs, label, topFrame, samples, report, count
        case message
        case stallClass = "class"
        case signature, suppressed, phase, mode, job
        case windowS, iterations, busyP50Ms, busyP90Ms, busyP99Ms, busyMaxMs, utilization
    }

    public init(time: String, event: String) {
        self.time = time
        self.event = event
    }
}
