/// One line of the JSON-lines event log. Fields that do not apply to an event are omitted.
public struct StallEvent: Codable, Sendable, Equatable {
    /// Wall clock, ISO 8601 UTC with milliseconds.
    public var time: String
    /// `stall.begin`, `stall.interim`, `stall.end`, `process.frozen` or `monitor.error`.
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

    enum CodingKeys: String, CodingKey {
        case time, event, id, loop, tid, thresholdMs, elapsedMs, durationMs, label, topFrame, samples, report, count
        case message
        case stallClass = "class"
        case signature, suppressed, phase
    }

    public init(time: String, event: String) {
        self.time = time
        self.event = event
    }
}
