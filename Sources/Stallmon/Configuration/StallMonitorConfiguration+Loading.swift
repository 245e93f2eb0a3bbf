import Foundation

extension StallMonitorConfiguration {
    /// Every key the config file and the environment accept, in the order of `config/stallmon.conf`.
    public static let keys = [
        "threshold_ms", "sample_interval_ms", "max_samples", "max_frames", "interim_after_ms", "capture_timeout_ms",
        "signal", "report_dir", "event_log", "event_log_max_bytes", "event_log_max_files",
        "max_reports_per_signature_per_hour", "report_max_count", "report_max_bytes", "report_max_age_hours",
        "in_app_include", "in_app_exclude", "loop_stats_interval_s", "lock_holder_stacks", "spool", "upload_endpoint", "upload_format",
        "upload_token", "upload_token_file", "upload_headers",
        "service_name", "upload_batch_max_reports", "upload_batch_max_age_ms", "upload_max_body_bytes",
        "upload_timeout_ms", "upload_backoff_ms", "upload_backoff_max_ms", "upload_retry_after_max_ms",
        "spool_max_reports", "spool_max_bytes", "spool_max_age_hours",
    ]

    /// The environment variable naming a config file to load.
    public static let configFileVariable = "STALLMON_CONFIG"

    /// Loads `path` (if given) over the defaults, then applies `STALLMON_<KEY>` variables from `environment`, then
    /// validates. Errors name the file and line, or the variable, and the offending value.
    public static func load(file path: String?,
                            environment: [String: String] = ProcessInfo.processInfo.environment,
                            base: StallMonitorConfiguration = StallMonitorConfiguration())
        throws(ConfigurationError) -> StallMonitorConfiguration
    {
        var configuration = base
        if let path {
            let text: String
            do {
                text = try String(contentsOfFile: path, encoding: .utf8)
            } catch {
                throw ConfigurationError("cannot read config file \(path): \(error.localizedDescription)")
            }
            for (key, value, line) in try parse(text, source: path) {
                do {
                    try configuration.set(key, to: value)
                } catch {
                    throw ConfigurationError("\(path):\(line): \(error.description)")
                }
            }
        }
        for (name, value) in environment.sorted(by: { $0.key < $1.key }) where name.hasPrefix("STALLMON_") {
            if name == configFileVariable { continue }
            let key = String(name.dropFirst("STALLMON_".count)).lowercased()
            guard keys.contains(key) else {
                throw ConfigurationError("unknown environment variable \(name) (known: "
                    + keys.map { "STALLMON_" + $0.uppercased() }.joined(separator: ", ") + ")")
            }
            do {
                try configuration.set(key, to: value)
            } catch {
                throw ConfigurationError("environment \(name): \(error.description)")
            }
        }
        try configuration.validate()
        return configuration
    }

    /// `key = value` lines; `#` starts a comment; blank lines are ignored. Returns (key, value, line number).
    static func parse(_ text: String, source: String) throws(ConfigurationError) -> [(String, String, Int)] {
        var entries: [(String, String, Int)] = []
        for (index, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            var line = Substring(rawLine)
            if let hash = line.firstIndex(of: "#") { line = line[..<hash] }
            let content = String(line).trimmingWhitespace()
            if content.isEmpty { continue }
            guard let equals = content.firstIndex(of: "=") else {
                throw ConfigurationError("\(source):\(index + 1): expected `key = value`, found "
                    + Self.describeForError(content))
            }
            let key = String(content[..<equals]).trimmingWhitespace()
            var value = String(content[content.index(after: equals)...]).trimmingWhitespace()
            if value.count >= 2, value.first == "\"", value.last == "\"" { value = String(value.dropFirst().dropLast()) }
            guard keys.contains(key) else {
                throw ConfigurationError("\(source):\(index + 1): unknown config key `\(key)` (known: "
                    + keys.joined(separator: ", ") + ")")
            }
            entries.append((key, value, index + 1))
        }
        return entries
    }

    /// Keys whose values are secrets: never shown in an error.
    static let secretKeys: Set<String> = ["upload_token", "upload_headers"]

    /// A malformed line as an error may show it: in full when it begins with a key whose value is no secret;
    /// otherwise only its first word if that is a known key, else nothing (it may be a token typed on its own).
    static func describeForError(_ line: String) -> String {
        let firstWord = String(line.prefix { !$0.isWhitespace && $0 != ":" })
        if keys.contains(firstWord) && !secretKeys.contains(firstWord) { return "`\(line)`" }
        if keys.contains(firstWord) { return "`\(firstWord) …` (the value is not shown: it is a secret)" }
        return "a line that is not shown (it may hold a secret)"
    }

    /// Sets one knob from its textual form.
    mutating func set(_ key: String, to value: String) throws(ConfigurationError) {
        func milliseconds() throws(ConfigurationError) -> Duration {
            guard let number = Double(value), number.isFinite else {
                throw .invalid(key: key, value: value, reason: "expected a number of milliseconds")
            }
            guard abs(number) < 1e12 else {  // ~31 years; beyond, the nanoseconds overflow
                throw .invalid(key: key, value: value, reason: "out of range")
            }
            return .nanoseconds(Int64((number * 1_000_000).rounded()))
        }
        func integer() throws(ConfigurationError) -> Int {
            guard let number = Int(value) else { throw .invalid(key: key, value: value, reason: "expected an integer") }
            return number
        }
        switch key {
        case "threshold_ms": threshold = try milliseconds()
        case "sample_interval_ms": sampleInterval = try milliseconds()
        case "max_samples": maxSamples = try integer()
        case "max_frames": maxFrames = try integer()
        case "interim_after_ms": interimAfter = try milliseconds()
        case "capture_timeout_ms": captureTimeout = try milliseconds()
        case "signal": signal = try SamplingSignal(parsing: value)
        case "report_dir": reportDirectory = value.isEmpty ? Self.defaultReportDirectory() : value
        case "event_log": eventLogPath = value.isEmpty ? nil : value
        case "event_log_max_bytes": eventLogMaxBytes = try integer()
        case "event_log_max_files": eventLogMaxFiles = try integer()
        case "max_reports_per_signature_per_hour": maxReportsPerSignaturePerHour = try integer()
        case "report_max_count": reportMaxCount = try integer()
        case "report_max_bytes": reportMaxBytes = try integer()
        case "report_max_age_hours":
            guard let hours = Double(value), hours > 0, hours < 1e6 else {
                throw .invalid(key: key, value: value, reason: "expected a positive number of hours (< 1000000)")
            }
            reportMaxAge = .seconds(hours * 3600)
        case "loop_stats_interval_s":
            guard let seconds = Double(value), seconds >= 0, seconds <= 86_400 else {
                throw .invalid(key: key, value: value, reason: "expected seconds from 0 (off) to 86400")
            }
            loopStatsInterval = .nanoseconds(Int64((seconds * 1e9).rounded()))
        case "lock_holder_stacks":
            switch value.lowercased() {
            case "on", "true", "yes", "1": lockHolderStacks = true
            case "off", "false", "no", "0": lockHolderStacks = false
            default: throw .invalid(key: key, value: value, reason: "expected on or off")
            }
        case "in_app_include": inApp.include = try InAppRules.parseModules(value, key: key)
        case "in_app_exclude": inApp.exclude = try InAppRules.parseModules(value, key: key)
        case "spool":
            switch value.lowercased() {
            case "on", "true", "yes", "1": upload.spool = true
            case "off", "false", "no", "0": upload.spool = false
            case "": upload.spool = nil
            default: throw .invalid(key: key, value: value, reason: "expected on or off")
            }
        case "upload_endpoint":
            upload.endpoint = value.isEmpty ? nil : value
            try upload.validateEndpoint()  // here, so the error names the file and line
        case "upload_format":
            guard let format = UploadFormat(rawValue: value.lowercased()) else {
                throw .invalid(key: key, value: value, reason: "expected otlp or ndjson")
            }
            upload.format = format
        case "upload_token":  // never echoed in errors
            guard UploadConfiguration.isValidFieldValue(value) else {
                throw ConfigurationError("invalid upload_token: contains a control character or a newline "
                    + "(the value is not shown)")
            }
            upload.token = value.isEmpty ? nil : value
        case "upload_token_file": upload.tokenFile = value.isEmpty ? nil : value
        case "upload_headers": upload.headers = try UploadConfiguration.parseHeaders(value)
        case "service_name": upload.serviceName = value.isEmpty ? nil : value
        case "upload_batch_max_reports": upload.batchMaxReports = try integer()
        case "upload_batch_max_age_ms": upload.batchMaxAge = try milliseconds()
        case "upload_max_body_bytes": upload.maxBodyBytes = try integer()
        case "upload_timeout_ms": upload.requestTimeout = try milliseconds()
        case "upload_backoff_ms": upload.backoffBase = try milliseconds()
        case "upload_backoff_max_ms": upload.backoffMax = try milliseconds()
        case "upload_retry_after_max_ms": upload.retryAfterCap = try milliseconds()
        case "spool_max_reports": upload.spoolMaxReports = try integer()
        case "spool_max_bytes": upload.spoolMaxBytes = try integer()
        case "spool_max_age_hours":
            guard let hours = Double(value), hours > 0, hours < 1e6 else {
                throw .invalid(key: key, value: value, reason: "expected a positive number of hours (< 1000000)")
            }
            upload.spoolMaxAge = .seconds(hours * 3600)
        default: throw ConfigurationError("unknown config key `\(key)`")
        }
    }
}
