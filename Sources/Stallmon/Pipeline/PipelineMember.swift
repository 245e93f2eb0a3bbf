import Logging
import Metrics
import StallmonReport

/// One monitor as the shared pipeline sees it: the settings its reports are written with, where its counters and
/// log messages go, and the sinks its reports are handed to. Immutable; shared between the monitor's watchdog and
/// the pipeline's writer thread.
final class PipelineMember: Sendable {
    let configuration: StallMonitorConfiguration
    let logger: Logger
    let counters: MonitorCounters
    let sinks: [any StallReportSink]
    let written: Counter
    let dropped: Counter

    init(configuration: StallMonitorConfiguration, logger: Logger, counters: MonitorCounters, loopName: String,
         sinks: [any StallReportSink]) {
        self.configuration = configuration
        self.logger = logger
        self.counters = counters
        self.sinks = sinks
        written = Counter(label: "stallmon_reports_written_total", dimensions: [("loop", loopName)])
        dropped = Counter(label: "stallmon_reports_dropped_total", dimensions: [("loop", loopName)])
    }

    /// The retention limits this monitor configured; applied after each report it writes.
    var retentionLimits: ReportRetention.Limits {
        ReportRetention.Limits(maxCount: configuration.reports.maxCount, maxBytes: configuration.reports.maxBytes,
                               maxAgeNanoseconds: UInt64(configuration.reports.maxAge.nanosecondsClamped))
    }
}
