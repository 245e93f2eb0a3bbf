// Needs the `Upload` trait (on by default), like StallmonUpload's Uploader.
#if Upload
import ArgumentParser
import CStallmonCLI
import Dispatch
import Foundation
import Logging
import Stallmon
import StallmonReport
import StallmonUpload

/// `stallmon upload`: deliver the spool to a collector, once or as a daemon.
struct UploadCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "upload",
        abstract: "Send spooled stall reports to a collector (OTLP/HTTP logs or NDJSON).",
        discussion: """
            Reads <report_dir>/spool/pending (filled by services whose configuration has `spool = on` or an \
            upload_endpoint), sends batches gzip-compressed, and deletes an entry only after a 2xx answer. \
            429, 502, 503, 504 and connection failures are retried with exponential backoff and jitter, honouring \
            Retry-After; any other answer moves the batch to spool/rejected with the reason. The bearer token comes \
            from upload_token / STALLMON_UPLOAD_TOKEN or upload_token_file and is never printed.

            --once (default) sends everything pending, retrying until --deadline; exit status 0 when the spool is \
            empty afterwards, 1 when reports remain (they are kept for the next run) or delivered ones could not be \
            removed (a read-only spool: they are not sent again in this run). --daemon keeps watching the \
            spool; SIGTERM or SIGINT finish or abandon the request in flight within --deadline and exit 0.
            """)

    @Argument(help: "Report directory whose spool to upload (default: report_dir of the configuration).")
    var directory: String?

    @Option(help: "Collector URL (overrides upload_endpoint). OTLP: base URL, /v1/logs is appended.")
    var endpoint: String?

    @Option(help: "Wire format: otlp or ndjson (overrides upload_format).")
    var format: String?

    @Flag(help: "Send what is pending, then exit (default).")
    var once = false

    @Flag(help: "Keep running and upload as reports arrive.")
    var daemon = false

    @Option(help: "Seconds: --once gives up retrying after this; --daemon's shutdown grace period.")
    var deadline: Double = 30

    @OptionGroup var config: ConfigOptions

    /// The longest --deadline: a year.
    static let longestDeadline: Double = 365 * 86_400

    func validate() throws {
        guard !(once && daemon) else { throw ValidationError("--once and --daemon exclude each other") }
        // NaN fails both comparisons; the bound keeps the nanoseconds within Int64 (a year is 3.2e16 of 9.2e18).
        guard deadline > 0, deadline <= Self.longestDeadline else {
            throw ValidationError("--deadline must be greater than 0 and at most \(Int(Self.longestDeadline)) s (a year)")
        }
        if let format, UploadFormat(rawValue: format.lowercased()) == nil {
            throw ValidationError("unknown --format \(format) (expected otlp or ndjson)")
        }
    }

    func run() throws {
        var configuration = try config.load()
        if let directory { configuration.reports.directory = directory }
        if let endpoint { configuration.upload.endpoint = endpoint }
        if let format { configuration.upload.format = UploadFormat(rawValue: format.lowercased())! }
        var logger = Logger(label: "stallmon.upload")
        logger.logLevel = .info
        do {
            // Before anything in it is read, locked or sent: a directory another user could steer is refused.
            try DirectoryTrust.verifyIfPresent(configuration.reports.directory)
        } catch {
            warn("\(error)")
            throw ExitCode(1)
        }
        let uploader: Uploader
        do {
            try configuration.upload.validate()
            uploader = try Uploader(spool: Spool(reportDirectory: configuration.reports.directory),
                                    configuration: configuration.upload, logger: logger)
        } catch {
            throw ValidationError(error.description)
        }
        let grace = Duration.nanoseconds(Int64(deadline * 1e9))
        if daemon {
            runDaemon(uploader, grace: grace)
            return
        }
        let statistics = uploader.flush(deadline: grace)
        print("delivered \(statistics.delivered), rejected \(statistics.rejected), dropped \(statistics.dropped), "
            + "pending \(statistics.pending) (\(statistics.requests) requests, "
            + "\(statistics.retryableFailures) retryable failures)"
            + (statistics.deliveredNotRemoved > 0
                ? "; \(statistics.deliveredNotRemoved) delivered but not removable from the spool" : "")
            + (statistics.profilesRefused > 0
                ? "; the profiles of \(statistics.profilesRefused) refused by the receiver (their logs delivered)" : ""))
        if statistics.pending > 0 || statistics.deliveredNotRemoved > 0 { throw ExitCode(1) }
    }

    private func runDaemon(_ uploader: Uploader, grace: Duration) {
        // SIGTERM and SIGINT were blocked before main (CStallmonCLI), so one sent while starting is still pending:
        // a thread takes them with sigwait. Without that constructor (an unusual launch), fall back to blocking now.
        if cstallmon_cli_stop_signals_blocked() == 0 {
            var stopSignals = sigset_t()
            sigemptyset(&stopSignals)
            sigaddset(&stopSignals, SIGTERM)
            sigaddset(&stopSignals, SIGINT)
            pthread_sigmask(SIG_BLOCK, &stopSignals, nil)
        }
        let stop = DispatchSemaphore(value: 0)
        let waiter = Thread {
            _ = cstallmon_cli_wait_for_stop_signal()
            stop.signal()
        }
        waiter.start()
        warn("uploading \(uploader.spool.pendingDirectory) to "
            + "\(UploadConfiguration.redacted(endpoint: uploader.configuration.endpoint ?? "")) "
            + "(\(uploader.configuration.format.rawValue)); SIGTERM or SIGINT to stop")
        uploader.start()
        stop.wait()
        uploader.stop(deadline: grace)
        let statistics = uploader.statistics
        warn("stopped: delivered \(statistics.delivered), rejected \(statistics.rejected), pending \(statistics.pending)")

    }
}
#endif  // Upload
