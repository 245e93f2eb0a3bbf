extension StallMonitorConfiguration {
    /// Every key of the config file and the environment, once, grouped by concern in the order of
    /// `config/stallmon.conf`.
    static let table: [ConfigurationKey] = detectionKeys + reportKeys + analysisKeys + hangKeys + uploadKeys

    /// Detection and capture: when a stall begins, how it is sampled.
    private static let detectionKeys: [ConfigurationKey] = [
        .milliseconds("threshold_ms", \.detection.threshold),
        .milliseconds("sample_interval_ms", \.detection.sampleInterval),
        .integer("max_samples", \.detection.maxSamples),
        .integer("max_frames", \.detection.maxFrames),
        .milliseconds("interim_after_ms", \.detection.interimAfter),
        .milliseconds("capture_timeout_ms", \.detection.captureTimeout),
        ConfigurationKey("signal") { (configuration, value) throws(ConfigurationError) in
            configuration.detection.signal = try SamplingSignal(parsing: value)
        },
    ]

    /// Reports and the event log: where they go, how many are kept.
    private static let reportKeys: [ConfigurationKey] = [
        ConfigurationKey("report_dir") { configuration, value in
            configuration.reports.directory = value.isEmpty ? defaultReportDirectory() : value
        },
        .optionalText("event_log", \.reports.eventLogPath),
        .integer("event_log_max_bytes", \.reports.eventLogMaxBytes),
        .integer("event_log_max_files", \.reports.eventLogMaxFiles),
        .integer("max_reports_per_signature_per_hour", \.reports.maxReportsPerSignaturePerHour),
        .integer("report_max_count", \.reports.maxCount),
        .integer("report_max_bytes", \.reports.maxBytes),
        .hours("report_max_age_hours", \.reports.maxAge),
    ]

    /// Analysis and statistics: what is the service's own code, what is counted beside the stalls.
    private static let analysisKeys: [ConfigurationKey] = [
        ConfigurationKey("in_app_include") { (configuration, value) throws(ConfigurationError) in
            configuration.analysis.inApp.include = try InAppRules.parseModules(value, key: "in_app_include")
        },
        ConfigurationKey("in_app_exclude") { (configuration, value) throws(ConfigurationError) in
            configuration.analysis.inApp.exclude = try InAppRules.parseModules(value, key: "in_app_exclude")
        },
        ConfigurationKey("loop_stats_interval_s") { (configuration, value) throws(ConfigurationError) in
            guard let seconds = Double(value), seconds >= 0, seconds <= 86_400 else {
                throw .invalid(key: "loop_stats_interval_s", value: value,
                               reason: "expected seconds from 0 (off) to 86400")
            }
            configuration.analysis.loopStatsInterval = .nanoseconds(Int64((seconds * 1e9).rounded()))
        },
        .onOff("lock_holder_stacks", \.analysis.lockHolderStacks),
        .onOff("pool_statistics", \.analysis.poolStatistics),
    ]

    /// A loop that never comes back: systemd's watchdog, ending the process, the control socket.
    private static let hangKeys: [ConfigurationKey] = [
        .choice("hang_action", \.hangs.action, expected: "none or abort"),
        .milliseconds("hang_abort_after_ms", \.hangs.abortAfter),
        .choice("systemd_watchdog", \.hangs.systemdWatchdog, expected: "auto, on or off"),
        .milliseconds("systemd_hang_after_ms", \.hangs.systemdHangAfter),
        .onOff("control_socket", \.hangs.controlSocket),
    ]

    /// Shipping reports: the spool, the endpoint and its credentials, batching and retries.
    private static let uploadKeys: [ConfigurationKey] = [
        ConfigurationKey("spool") { (configuration, value) throws(ConfigurationError) in
            guard value.isEmpty || ConfigurationKey.Parse.onOff(value) != nil else {
                throw .invalid(key: "spool", value: value, reason: "expected on or off")
            }
            configuration.upload.spool = value.isEmpty ? nil : ConfigurationKey.Parse.onOff(value)
        },
        ConfigurationKey("upload_endpoint") { (configuration, value) throws(ConfigurationError) in
            configuration.upload.endpoint = value.isEmpty ? nil : value
            try configuration.upload.validateEndpoint()  // here, so the error names the file and line
        },
        .choice("upload_format", \.upload.format, expected: "otlp or ndjson"),
        ConfigurationKey("upload_signals") { (configuration, value) throws(ConfigurationError) in
            guard let signals = UploadSignal.parseList(value) else {
                throw .invalid(key: "upload_signals", value: value, reason: "expected logs, profiles or logs,profiles")
            }
            configuration.upload.signals = signals
        },
        ConfigurationKey("upload_token", secret: true) { (configuration, value) throws(ConfigurationError) in
            guard UploadConfiguration.isValidFieldValue(value) else {  // never echoed in errors
                throw ConfigurationError("invalid upload_token: contains a control character or a newline "
                    + "(the value is not shown)")
            }
            configuration.upload.token = value.isEmpty ? nil : value
        },
        .optionalText("upload_token_file", \.upload.tokenFile),  // errors show it only if a path
        ConfigurationKey("upload_headers", secret: true) { (configuration, value) throws(ConfigurationError) in
            configuration.upload.headers = try UploadConfiguration.parseHeaders(value)
        },
        .optionalText("service_name", \.upload.serviceName),
        .integer("upload_batch_max_reports", \.upload.batchMaxReports),
        .milliseconds("upload_batch_max_age_ms", \.upload.batchMaxAge),
        .integer("upload_max_body_bytes", \.upload.maxBodyBytes),
        .milliseconds("upload_timeout_ms", \.upload.requestTimeout),
        .milliseconds("upload_backoff_ms", \.upload.backoffBase),
        .milliseconds("upload_backoff_max_ms", \.upload.backoffMax),
        .milliseconds("upload_retry_after_max_ms", \.upload.retryAfterCap),
        .integer("spool_max_reports", \.upload.spoolMaxReports),
        .integer("spool_max_bytes", \.upload.spoolMaxBytes),
        .hours("spool_max_age_hours", \.upload.spoolMaxAge),
        .integer("rejected_max_reports", \.upload.rejectedMaxReports),
        .integer("rejected_max_bytes", \.upload.rejectedMaxBytes),
        .hours("rejected_max_age_hours", \.upload.rejectedMaxAge),
    ]
}
