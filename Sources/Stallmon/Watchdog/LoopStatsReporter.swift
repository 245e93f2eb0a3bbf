import Metrics
import StallmonLoop

/// The watchdog's export of every-iteration figures: swift-metrics every `metricsInterval` (10 s) and a `loop.stats`
/// event-log line every `lineInterval` (`loop_stats_interval_s`; 0: none), each over its own window. Pure
/// scheduling over an injected clock; the watchdog calls `step` when `nextDue` comes and submits the line.
struct LoopStatsReporter {
    /// One window's figures, for the event log.
    struct Line: Sendable, Equatable {
        var loopName: String
        var window: LoopStatistics
    }

    static let metricsInterval: UInt64 = 10_000_000_000

    private let loopName: String
    private let lineInterval: UInt64
    private var lineStart: (at: UInt64, reading: LoopStatistics)?
    private var metricsStart: (at: UInt64, reading: LoopStatistics)?
    private let utilization: Gauge
    private let busy: [(quantile: Double, gauge: Gauge)]
    private let iterations: Counter

    init(loopName: String, lineInterval: Duration) {
        self.loopName = loopName
        self.lineInterval = UInt64(max(0, lineInterval.nanosecondsClamped))
        utilization = Gauge(label: "stallmon_loop_utilization", dimensions: [("loop", loopName)])
        busy = [0.5, 0.9, 0.99, 1].map { quantile in
            (quantile, Gauge(label: "stallmon_loop_busy_seconds",
                             dimensions: [("loop", loopName), ("quantile", quantile == 1 ? "1" : "\(quantile)")]))
        }
        iterations = Counter(label: "stallmon_loop_iterations_total", dimensions: [("loop", loopName)])
    }

    /// When `step` is next due (monotonic ns), nil before the first step.
    var nextDue: UInt64? {
        guard let metricsStart else { return nil }
        let metrics = metricsStart.at &+ Self.metricsInterval
        guard lineInterval > 0, let lineStart else { return metrics }
        return min(metrics, lineStart.at &+ lineInterval)
    }

    /// Updates the metrics and returns a line when their windows are over; the first call only opens the windows.
    mutating func step(now: UInt64, reading: LoopStatistics) -> Line? {
        guard let metricsStart, let lineStart else {
            self.metricsStart = (now, reading)
            self.lineStart = (now, reading)
            return nil
        }
        if now >= metricsStart.at &+ Self.metricsInterval {
            let window = reading.since(metricsStart.reading)
            utilization.record(window.utilization)
            for (quantile, gauge) in busy {
                if let value = window.busyHistogram.percentile(quantile) {
                    gauge.record(Double(value.nanosecondsClamped) / 1e9)
                }
            }
            iterations.increment(by: Int64(clamping: window.iterations))
            self.metricsStart = (now, reading)
        }
        guard lineInterval > 0, now >= lineStart.at &+ lineInterval else { return nil }
        self.lineStart = (now, reading)
        return Line(loopName: loopName, window: reading.since(lineStart.reading))
    }
}
