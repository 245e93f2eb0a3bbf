import StallmonReport

/// A report the monitor has written, as a `StallReportSink` receives it.
public struct WrittenStallReport: Sendable {
    /// The report itself.
    public let report: StallReport
    /// Where the report is published in the report directory. An interim report and its final replacement share it.
    public let path: String
    /// A file on the same file system holding exactly the report's JSON, already fsynced. Valid only during
    /// `StallReportSink.receive(_:)`: a sink that keeps the file links or copies it from here, never from `path`,
    /// because `path` may not exist yet.
    public let contentsPath: String

    public init(report: StallReport, path: String, contentsPath: String) {
        self.report = report
        self.path = path
        self.contentsPath = contentsPath
    }
}

/// Where a written report goes next: the monitor's one extension point downstream of the report file, in the spirit
/// of swift-log's `LogHandler`. StallmonUpload's `UploadSink` (spool + uploader) is one implementation; a service can
/// add its own (forward reports to its own telemetry, count them, …).
///
/// The monitor calls `receive(_:)` on its writer thread (never the loop thread, never the watchdog) once per report,
/// after the report is durable at `contentsPath` and before it appears at `path`. So a report visible in the report
/// directory has always been handed to every sink, even if the process is killed between the two steps. A sink that
/// throws does not stop the report from being published; the monitor logs the failure once per change of state.
/// `receive` should return within milliseconds: reports are written one after another.
public protocol StallReportSink: Sendable {
    /// Takes one written report. Called on the monitor's writer thread.
    func receive(_ written: WrittenStallReport) throws

    /// True for a sink that carries out the configuration's `upload` settings (`spool`, `upload_*`). A monitor
    /// whose configuration asks for spooling refuses to be created without one, so the setting never silently does
    /// nothing. Default: false.
    var handlesUploadConfiguration: Bool { get }

    /// Called once by `LooperStallMonitor.start()`, before the first report. Default: nothing.
    func start()

    /// Called once by a monitor's `stop()` after the last report was handed over; should return within `deadline`.
    /// Default: nothing.
    func stop(deadline: Duration)
}

extension StallReportSink {
    public var handlesUploadConfiguration: Bool { false }
    public func start() {}
    public func stop(deadline: Duration) {}
}
