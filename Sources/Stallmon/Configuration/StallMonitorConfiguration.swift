import CStallmonCapture
#if canImport(Glibc)
import Glibc
#endif

/// Everything a monitor (`LooperStallMonitor`, `ConcurrencyStallMonitor`, `NIOStallMonitor`) can be told, grouped by
/// concern as `config/stallmon.conf` is. The same knobs exist as keys of the config file and as `STALLMON_*`
/// environment variables, which override the file; each property names its key.
///
/// ```swift
/// var configuration = StallMonitorConfiguration()
/// configuration.detection.threshold = .milliseconds(50)
/// configuration.reports.directory = "/var/lib/my-service/stallmon"
/// ```
public struct StallMonitorConfiguration: Sendable, Equatable {
    /// When a stall begins and how it is sampled.
    public var detection: Detection
    /// Where reports and the event log go, and how many are kept.
    public var reports: Reports
    /// What is the service's own code, and what is counted beside the stalls.
    public var analysis: Analysis
    /// A loop that never comes back: ending the process, systemd's watchdog, the control socket.
    public var hangs: Hangs
    /// Spooling and upload of reports (keys `spool`, `upload_*`, `spool_*`, `rejected_*`, `service_name`); off by
    /// default. Acted on by `StallmonUpload`'s sink.
    public var upload: UploadConfiguration

    /// Creates a configuration; concerns not given take their defaults. Call `validate()` (the monitor does) to
    /// check them.
    public init(detection: Detection = Detection(), reports: Reports = Reports(), analysis: Analysis = Analysis(),
                hangs: Hangs = Hangs(), upload: UploadConfiguration = UploadConfiguration()) {
        self.detection = detection
        self.reports = reports
        self.analysis = analysis
        self.hangs = hangs
        self.upload = upload
    }

    /// When a stall begins and how it is sampled.
    public struct Detection: Sendable, Equatable {
        /// A loop iteration (or a job) busy for longer than this is a stall. Key `threshold_ms`, default 100 ms.
        public var threshold: Duration
        /// While a stall lasts, the stack is sampled this often. Key `sample_interval_ms`, default 10 ms;
        /// must be shorter than `threshold`.
        public var sampleInterval: Duration
        /// At most this many samples per stall. Key `max_samples`, default 500.
        public var maxSamples: Int
        /// At most this many frames per sample (deeper stacks are truncated). Key `max_frames`, default 128, ≤ 256.
        public var maxFrames: Int
        /// A stall still running after this long gets an interim report marked `ongoing`, replaced by the final
        /// one. Key `interim_after_ms`, default 2000 ms.
        public var interimAfter: Duration
        /// The longest the watchdog waits for one capture before recording "capture timed out". Key
        /// `capture_timeout_ms`, default 100 ms.
        public var captureTimeout: Duration
        /// The real-time signal used to sample a stalled thread. Key `signal`, default `SIGRTMIN+3`.
        public var signal: SamplingSignal

        /// Values not given take their defaults.
        public init(threshold: Duration = .milliseconds(100), sampleInterval: Duration = .milliseconds(10),
                    maxSamples: Int = 500, maxFrames: Int = 128, interimAfter: Duration = .milliseconds(2000),
                    captureTimeout: Duration = .milliseconds(100), signal: SamplingSignal = .default) {
            self.threshold = threshold
            self.sampleInterval = sampleInterval
            self.maxSamples = maxSamples
            self.maxFrames = maxFrames
            self.interimAfter = interimAfter
            self.captureTimeout = captureTimeout
            self.signal = signal
        }
    }

    /// Where reports and the event log go, and how many are kept.
    public struct Reports: Sendable, Equatable {
        /// Where reports go (created 0700 if missing). Key `report_dir`, default `defaultReportDirectory()`:
        /// `$STATE_DIRECTORY/stallmon` under systemd, else `/var/tmp/stallmon-<euid>`.
        public var directory: String
        /// The JSON-lines event log. Key `event_log`, default `<report_dir>/events.jsonl`.
        public var eventLogPath: String?
        /// The event log is rotated when it would grow past this. Key `event_log_max_bytes`, default 10 MiB.
        public var eventLogMaxBytes: Int
        /// Rotated logs kept besides the live one (`events.jsonl.1` …). Key `event_log_max_files`, default 3.
        public var eventLogMaxFiles: Int
        /// At most this many full reports per stall signature per hour; further stalls of that kind are only
        /// counted (a `stall.end` line with `suppressed`, and `suppressedBefore` in the next report). Key
        /// `max_reports_per_signature_per_hour`, default 30.
        public var maxReportsPerSignaturePerHour: Int
        /// Retention of the report directory: the oldest reports are removed beyond this many (key
        /// `report_max_count`, default 1000), …
        public var maxCount: Int
        /// … this many bytes (key `report_max_bytes`, default 256 MiB), …
        public var maxBytes: Int
        /// … or this age (key `report_max_age_hours`, default 336: 14 days). Reports still queued for upload are
        /// kept.
        public var maxAge: Duration

        /// Values not given take their defaults.
        public init(directory: String = StallMonitorConfiguration.defaultReportDirectory(),
                    eventLogPath: String? = nil, eventLogMaxBytes: Int = 10 << 20, eventLogMaxFiles: Int = 3,
                    maxReportsPerSignaturePerHour: Int = 30, maxCount: Int = 1000, maxBytes: Int = 256 << 20,
                    maxAge: Duration = .seconds(14 * 24 * 3600)) {
            self.directory = directory
            self.eventLogPath = eventLogPath
            self.eventLogMaxBytes = eventLogMaxBytes
            self.eventLogMaxFiles = eventLogMaxFiles
            self.maxReportsPerSignaturePerHour = maxReportsPerSignaturePerHour
            self.maxCount = maxCount
            self.maxBytes = maxBytes
            self.maxAge = maxAge
        }

        /// The event log path in effect: `eventLogPath`, or `events.jsonl` in the report directory.
        public var resolvedEventLogPath: String {
            eventLogPath ?? (directory.hasSuffix("/") ? directory : directory + "/") + "events.jsonl"
        }
    }

    /// What is the service's own code, and what is counted beside the stalls.
    public struct Analysis: Sendable, Equatable {
        /// Which frames are the service's own code (keys `in_app_include`, `in_app_exclude`: Swift module names).
        public var inApp: InAppRules
        /// How often each loop's `loop.stats` line (busy-time percentiles and utilization over the interval) is
        /// appended to the event log (key `loop_stats_interval_s`, default 60 s; `.zero` for none). Metrics are
        /// updated every 10 s regardless.
        public var loopStatsInterval: Duration
        /// While the loop waits for a lock whose holder the lock records, also sample the holder's stack with the
        /// sampling signal (key `lock_holder_stacks`, default on). A holder is signalled only while it runs or
        /// sleeps in a system call that `SA_RESTART` resumes (a lock, a read or write, `accept`, `wait4`), never in
        /// one a signal cuts short (`nanosleep`, `poll`, `epoll_wait`, `connect`), in an uninterruptible wait, or
        /// while it blocks the signal; then only its system call is recorded.
        public var lockHolderStacks: Bool
        /// For `ConcurrencyStallMonitor`: count every job's queue delay and run time (key `pool_statistics`,
        /// default on): the `pool.stats` lines, the `stallmon_pool_*` metrics, and the starvation reports'
        /// `waitedJobs` and `jobsRun`. Off, the workers pay only what stall and starvation detection need (one
        /// clock read per job instead of three, the end read only for a job the watchdog saw running, and no
        /// histogram), for services that want the lowest cost per job.
        public var poolStatistics: Bool

        /// Values not given take their defaults.
        public init(inApp: InAppRules = InAppRules(), loopStatsInterval: Duration = .seconds(60),
                    lockHolderStacks: Bool = true, poolStatistics: Bool = true) {
            self.inApp = inApp
            self.loopStatsInterval = loopStatsInterval
            self.lockHolderStacks = lockHolderStacks
            self.poolStatistics = poolStatistics
        }
    }

    /// A loop that never comes back: ending the process, systemd's watchdog, the control socket.
    public struct Hangs: Sendable, Equatable {
        /// What to do when a stall lasts `abortAfter` (key `hang_action`): `.none` (default) or `.abort`: write the
        /// report (durable) and the `stall.hang` event line, then end the process with SIGABRT, so a supervisor
        /// restarts it and a core dump (where enabled) keeps the rest of the evidence. Never for a frozen process
        /// (SIGSTOP, a container freeze): frozen time does not count.
        public var action: HangAction
        /// Key `hang_abort_after_ms`, default 60000 ms; with `hang_action = abort`, longer than `threshold_ms`.
        public var abortAfter: Duration
        /// systemd's watchdog fed from loop health (key `systemd_watchdog`): `.auto` (default) when
        /// `$NOTIFY_SOCKET` and `$WATCHDOG_USEC` are set (`WatchdogSec=` in the unit), `.on` whenever
        /// `$NOTIFY_SOCKET` is, `.off` never.
        public var systemdWatchdog: SystemdWatchdogMode
        /// A stall this long stops the `WATCHDOG=1` pings (after its report is durable), so systemd restarts the
        /// service once `WatchdogSec=` passes. Key `systemd_hang_after_ms`, default 10000 ms (a stall is one from
        /// `threshold_ms` on, so a shorter value acts at the threshold).
        public var systemdHangAfter: Duration
        /// A control socket in the report directory (`control-<pid>.sock`, 0600, the service's own user only) on
        /// which `stallmon snapshot PID` asks for a snapshot of every monitored loop and pool. Key
        /// `control_socket`, default on.
        public var controlSocket: Bool

        /// Values not given take their defaults.
        public init(action: HangAction = .none, abortAfter: Duration = .seconds(60),
                    systemdWatchdog: SystemdWatchdogMode = .auto, systemdHangAfter: Duration = .seconds(10),
                    controlSocket: Bool = true) {
            self.action = action
            self.abortAfter = abortAfter
            self.systemdWatchdog = systemdWatchdog
            self.systemdHangAfter = systemdHangAfter
            self.controlSocket = controlSocket
        }
    }

    /// The report directory when none is configured: `$STATE_DIRECTORY/stallmon` when systemd gives the service a
    /// state directory (`StateDirectory=`; the first one if several), else `/var/tmp/stallmon-<euid>`. Absolute, so a
    /// service started in `/` does not write to `/stallmon-reports`; per user, so `stallmon report` run by the same
    /// user finds it; in /var/tmp, so it survives a reboot.
    public static func defaultReportDirectory(stateDirectory: String? = getenv("STATE_DIRECTORY").map {
        String(cString: $0)
    }) -> String {
        if let first = stateDirectory?.split(separator: ":").first, first.hasPrefix("/") {
            return (first.hasSuffix("/") ? String(first.dropLast()) : String(first)) + "/stallmon"
        }
        return "/var/tmp/stallmon-\(geteuid())"
    }

    /// Throws a `ConfigurationError` naming the first value that makes no sense.
    public func validate() throws(ConfigurationError) {
        guard detection.threshold > .zero else {
            throw .invalid(key: "threshold_ms", value: "\(detection.threshold.milliseconds)",
                           reason: "must be greater than 0")
        }
        guard detection.sampleInterval > .zero else {
            throw .invalid(key: "sample_interval_ms", value: "\(detection.sampleInterval.milliseconds)",
                           reason: "must be greater than 0")
        }
        guard detection.sampleInterval < detection.threshold else {
            throw .invalid(key: "sample_interval_ms", value: "\(detection.sampleInterval.milliseconds)",
                           reason: "must be shorter than threshold_ms (\(detection.threshold.milliseconds))")
        }
        guard (1...100_000).contains(detection.maxSamples) else {
            throw .invalid(key: "max_samples", value: "\(detection.maxSamples)", reason: "must be between 1 and 100000")
        }
        guard (1...Int(CSTALLMON_MAX_FRAMES)).contains(detection.maxFrames) else {
            throw .invalid(key: "max_frames", value: "\(detection.maxFrames)",
                           reason: "must be between 1 and \(CSTALLMON_MAX_FRAMES)")
        }
        guard detection.interimAfter > detection.threshold else {
            throw .invalid(key: "interim_after_ms", value: "\(detection.interimAfter.milliseconds)",
                           reason: "must be longer than threshold_ms (\(detection.threshold.milliseconds))")
        }
        guard detection.captureTimeout > .zero, detection.captureTimeout <= .seconds(5) else {
            throw .invalid(key: "capture_timeout_ms", value: "\(detection.captureTimeout.milliseconds)",
                           reason: "must be between 0 (exclusive) and 5000")
        }
        guard !reports.directory.isEmpty else {
            throw .invalid(key: "report_dir", value: "", reason: "must not be empty")
        }
        guard reports.eventLogMaxBytes >= 4096 else {
            throw .invalid(key: "event_log_max_bytes", value: "\(reports.eventLogMaxBytes)",
                           reason: "must be at least 4096")
        }
        guard (0...100).contains(reports.eventLogMaxFiles) else {
            throw .invalid(key: "event_log_max_files", value: "\(reports.eventLogMaxFiles)",
                           reason: "must be between 0 and 100")
        }
        guard reports.maxCount >= 1 else {
            throw .invalid(key: "report_max_count", value: "\(reports.maxCount)", reason: "must be at least 1")
        }
        guard reports.maxBytes >= 4096 else {
            throw .invalid(key: "report_max_bytes", value: "\(reports.maxBytes)", reason: "must be at least 4096")
        }
        guard reports.maxAge > .zero else {
            throw .invalid(key: "report_max_age_hours", value: "\(reports.maxAge)", reason: "must be greater than 0")
        }
        guard reports.maxReportsPerSignaturePerHour >= 1 else {
            throw .invalid(key: "max_reports_per_signature_per_hour", value: "\(reports.maxReportsPerSignaturePerHour)",
                           reason: "must be at least 1")
        }
        // Checked only when it is acted on: a long threshold_ms with the defaults is no error.
        guard hangs.action == .none || hangs.abortAfter > detection.threshold else {
            throw .invalid(key: "hang_abort_after_ms", value: "\(hangs.abortAfter.milliseconds)",
                           reason: "must be longer than threshold_ms (\(detection.threshold.milliseconds)) "
                               + "with hang_action = abort")
        }
        guard hangs.systemdHangAfter > .zero else {
            throw .invalid(key: "systemd_hang_after_ms", value: "\(hangs.systemdHangAfter.milliseconds)",
                           reason: "must be greater than 0")
        }
        _ = try detection.signal.resolve()
        guard analysis.loopStatsInterval >= .zero && analysis.loopStatsInterval <= .seconds(86_400) else {
            throw .invalid(key: "loop_stats_interval_s", value: "\(analysis.loopStatsInterval)",
                           reason: "must be from 0 (off) to 86400 seconds")
        }
        try upload.validate()
    }
}

/// What a monitor does about a stall that lasts past `hang_abort_after_ms`.
public enum HangAction: String, Sendable, Equatable, CaseIterable {
    /// Nothing beyond the reports.
    case none
    /// Write the report, then end the process with SIGABRT.
    case abort
}

/// When the monitors feed systemd's watchdog (`WATCHDOG=1` on `$NOTIFY_SOCKET`).
public enum SystemdWatchdogMode: String, Sendable, Equatable, CaseIterable {
    /// When systemd asked for it: `$NOTIFY_SOCKET` and `$WATCHDOG_USEC` set.
    case auto
    /// Whenever `$NOTIFY_SOCKET` is set (every second when `$WATCHDOG_USEC` is not).
    case on
    /// Never.
    case off
}
