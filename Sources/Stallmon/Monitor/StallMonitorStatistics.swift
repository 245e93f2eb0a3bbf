import Synchronization

/// Counters of one monitor since it was created.
public struct StallMonitorStatistics: Sendable, Equatable {
    /// Stalls the watchdog detected.
    public var stallsDetected: Int
    /// Loop iterations that lasted at least the threshold, counted by the loop itself. Equal to `stallsDetected`
    /// unless the watchdog thread was itself starved of CPU.
    public var longIterations: Int
    /// Final reports written to disk.
    public var reportsWritten: Int
    /// Interim (ongoing) reports written.
    public var interimReportsWritten: Int
    /// Reports that could not be written (directory missing or read-only, disk full, writer backlog).
    public var reportsDropped: Int
    /// Event-log lines that could not be written.
    public var eventsDropped: Int
    /// Stack samples taken successfully.
    public var samplesCaptured: Int
    /// Captures that hit `capture_timeout_ms` or found an earlier signal still pending.
    public var captureTimeouts: Int
    /// Times the whole process was frozen (SIGSTOP, debugger, VM pause); never reported as stalls.
    public var freezes: Int = 0
    /// Stalls that got no report of their own because their signature hit the rate limit.
    public var reportsSuppressed: Int = 0
    /// Old reports removed by the retention (`report_max_count`, `report_max_bytes`, `report_max_age_hours`).
    public var reportsRemovedByRetention: Int = 0
    /// Every iteration since the monitor started: count, busy-time histogram, utilization.
    public var loop = LoopStatistics()
}

/// The shared, atomically updated form of `StallMonitorStatistics`.
final class MonitorCounters: Sendable {
    let stallsDetected = Atomic<Int>(0)
    let reportsWritten = Atomic<Int>(0)
    let interimReportsWritten = Atomic<Int>(0)
    let reportsDropped = Atomic<Int>(0)
    let eventsDropped = Atomic<Int>(0)
    let samplesCaptured = Atomic<Int>(0)
    let captureTimeouts = Atomic<Int>(0)
    let freezes = Atomic<Int>(0)
    let reportsSuppressed = Atomic<Int>(0)
    let reportsRemovedByRetention = Atomic<Int>(0)

    func snapshot(longIterations: Int) -> StallMonitorStatistics {
        StallMonitorStatistics(
            stallsDetected: stallsDetected.load(ordering: .acquiring),
            longIterations: longIterations,
            reportsWritten: reportsWritten.load(ordering: .relaxed),
            interimReportsWritten: interimReportsWritten.load(ordering: .relaxed),
            reportsDropped: reportsDropped.load(ordering: .relaxed),
            eventsDropped: eventsDropped.load(ordering: .relaxed),
            samplesCaptured: samplesCaptured.load(ordering: .relaxed),
            captureTimeouts: captureTimeouts.load(ordering: .relaxed),
            freezes: freezes.load(ordering: .relaxed),
            reportsSuppressed: reportsSuppressed.load(ordering: .relaxed),
            reportsRemovedByRetention: reportsRemovedByRetention.load(ordering: .relaxed))
    }
}
