import Logging
import Stallmon

/// The monitor's spool and uploader as a `StallReportSink`: every written report is hard-linked into
/// `<report_dir>/spool/pending/` and, when `upload_endpoint` is set, shipped by an uploader thread of its own (never
/// the loop thread). Without an endpoint (`spool = on`), reports wait for a sidecar `stallmon upload --daemon`.
///
/// ```swift
/// let monitor = try LooperStallMonitor(loop: loop, configuration: configuration, logger: logger,
///                                sinks: [try UploadSink(configuration: configuration, logger: logger)])
/// ```
///
/// The in-process uploader needs the package's `Upload` trait (on by default). Built without it, the sink spools
/// only, and a configured `upload_endpoint` is refused with an error that says so.
public final class UploadSink: StallReportSink {
    /// The spool reports are queued in.
    package let spool: Spool
    #if Upload
    /// The in-process uploader, when `upload_endpoint` is configured.
    package let uploader: Uploader?
    #endif

    /// Validates the upload settings of `configuration` (endpoint, limits, token) and prepares the uploader; nothing
    /// is sent before `LooperStallMonitor.start()`. Errors name the key and never show a secret.
    public init(configuration: StallMonitorConfiguration, logger: Logger) throws(ConfigurationError) {
        try configuration.upload.validate()
        spool = Spool(reportDirectory: configuration.reports.directory)
        #if Upload
        uploader = configuration.upload.endpoint == nil
            ? nil : try Uploader(spool: spool, configuration: configuration.upload, logger: logger)
        #else
        if configuration.upload.endpoint != nil {
            throw ConfigurationError("upload_endpoint needs stallmon's `Upload` package trait, which this build "
                + "leaves out: spool here (spool = on) and run `stallmon upload --daemon`, or enable the trait")
        }
        #endif
    }

    public var handlesUploadConfiguration: Bool { true }

    /// Links the report into `pending/` (from its durable contents, under its published name) and wakes the
    /// uploader.
    public func receive(_ written: WrittenStallReport) throws {
        try spool.enqueue(reportPath: written.contentsPath, name: Spool.entryName(forReportAt: written.path))
        #if Upload
        uploader?.notify()
        #endif
    }

    /// Repairs what a crash may have left (see `Spool.restoreUnpublishedReports()`), then starts the uploader.
    public func start() {
        spool.restoreUnpublishedReports()
        #if Upload
        uploader?.start()
        #endif
    }

    /// Sends what is pending until `deadline` (ignoring batch age); the rest stays in the spool.
    public func stop(deadline: Duration) {
        #if Upload
        uploader?.stop(deadline: deadline)
        #endif
    }
}
