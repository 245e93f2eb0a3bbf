import Metrics
import StallmonLoop

/// The export of a loop's every-iteration figures: swift-metrics every 10 s and a `loop.stats` event-log line every
/// `loop_stats_interval_s` (0: none), each over its own window (`StatisticsWindows`). Pure over injected readings;
/// the loop's probe source calls `step` when `nextDue` comes and submits the line.
struct LoopStatsReporter {
    /// One window's figures, for the event log.
    struct Line: Sendable, Equatable {
        var loopName: String
        var window: LoopStatistics
        /// The CPU limit's throttling over the same window, when the process has a limit.
        var throttling: CPUContention.WindowThrottling? = nil
    }

    private let loopName: String
    private var windows: StatisticsWindows<String, LoopStatistics>
    private let utilization: Gauge
    private let busy: [(quantile: Double, gauge: Gauge)]
    private let iterations: Counter

    init(loopName: String, lineInterval: Duration) {
        self.loopName = loopName
        windows = StatisticsWindows(lineInterval: lineInterval, emptyReading: LoopStatistics())
        utilization = Gauge(label: "stallmon_loop_utilization", dimensions: [("loop", loopName)])
        busy = [0.5, 0.9, 0.99, 1].map { quantile in
            (quantile, Gauge(label: "stallmon_loop_busy_seconds",
                             dimensions: [("loop", loopName), ("quantile", quantile == 1 ? "1" : "\(quantile)")]))
        }
        iterations = Counter(label: "stallmon_loop_iterations_total", dimensions: [("loop", loopName)])
    }

    /// When `step` is next due (monotonic ns), nil before the first step.
    var nextDue: UInt64? { windows.nextDue }

    /// Updates the metrics and returns a line when their windows are over; the first call only opens the windows.
    mutating func step(now: UInt64, reading: LoopStatistics) -> Line? {
        let step = windows.step(now: now, readings: [loopName: reading])
        for closed in step.metrics { record(closed.end.reading.since(closed.start.reading)) }
        return step.lines.first.map { Line(loopName: loopName, window: $0.end.reading.since($0.start.reading)) }
    }

    private func record(_ window: LoopStatistics) {
        utilization.record(window.utilization)
        for (quantile, gauge) in busy {
            if let value = window.busyHistogram.percentile(quantile) {
                gauge.record(Double(value.nanosecondsClamped) / 1e9)
            }
        }
        iterations.increment(by: Int64(clamping: window.iterations))
    }
}
