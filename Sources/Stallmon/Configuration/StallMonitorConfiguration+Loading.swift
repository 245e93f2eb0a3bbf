import Foundation

extension StallMonitorConfiguration {
    /// Every key the config file and the environment accept, in the order of `config/stallmon.conf`.
    public static let keys = [
        "threshold_ms", "sample_interval_ms", "max_samples", "max_frames", "interim_after_ms", "capture_timeout_ms",
        "signal", "report_dir", "event_log", "event_log_max_bytes", "event_log_max_files",
        "max_reports_per_signature_per_hour", "report_max_count", "report_max_bytes", "report_max_age_hours",
        "in_app_include", "in_app_exclude", "loop_stats_interval_s", "lock_holder_stacks", "pool_statistics", "hang_action",
        "hang_abort_after_ms", "systemd_watchdog", "systemd_hang_after_ms", "control_socket", "spool", "upload_endpoint", "upload_format",
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

    /// `key = value` lines. Returns (key, value, line number).
    ///
    /// - Blank lines and lines whose first non-blank character is `#` are ignored.
    /// - An unquoted value runs to the end of the line; `#` after whitespace starts a comment, so `ab#cd` is a
    ///   value and `100  # ms` is `100`. Surrounding whitespace is dropped.
    /// - A value in double quotes is taken as written: `#` and spaces are part of it, `\"` is a quote and `\\` a
    ///   backslash; only whitespace and a comment may follow the closing quote.
    /// - Errors never show a line that could hold a secret: not a line without `=`, not an unknown key (a token
    ///   typed on a line of its own, `=` padding and all), not the value of a secret key.
    static func parse(_ text: String, source: String) throws(ConfigurationError) -> [(String, String, Int)] {
        var entries: [(String, String, Int)] = []
        for (index, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let location = "\(source):\(index + 1)"
            let content = String(rawLine).trimmingWhitespace()
            if content.isEmpty || content.hasPrefix("#") { continue }
            guard let equals = content.firstIndex(of: "=") else {
                throw ConfigurationError("\(location): expected `key = value`, found " + Self.describeForError(content))
            }
            let key = String(content[..<equals]).trimmingWhitespace()
            guard keys.contains(key) else {
                throw ConfigurationError("\(location): unknown config key (the line is not shown: it may hold a secret)"
                    + (Self.nearestKey(to: key).map { "; did you mean `\($0)`?" } ?? ".")
                    + " Known keys: " + keys.joined(separator: ", "))
            }
            let value: String
            do throws(ValueSyntaxError) {
                value = try Self.parseValue(content[content.index(after: equals)...])
            } catch {
                throw ConfigurationError("\(location): \(key): \(error.reason)"
                    + (secretKeys.contains(key) ? " (the value is not shown: it is a secret)" : ""))
            }
            entries.append((key, value, index + 1))
        }
        return entries
    }

    private struct ValueSyntaxError: Error {
        let reason: String
    }

    /// The value after `=` (see `parse`).
    private static func parseValue(_ text: Substring) throws(ValueSyntaxError) -> String {
        var rest = text.drop { $0 == " " || $0 == "\t" }
        guard rest.first == "\"" else {
            var end = rest.endIndex
            var previous: Character = " "
            for index in rest.indices {
                if rest[index] == "#" && previous.isWhitespace {
                    end = index
                    break
                }
                previous = rest[index]
            }
            return String(rest[..<end]).trimmingWhitespace()
        }
        rest.removeFirst()
        var value = ""
        var closed = false
        while let character = rest.popFirst() {
            if character == "\"" {
                closed = true
                break
            }
            if character == "\\" {
                guard let escaped = rest.popFirst(), escaped == "\"" || escaped == "\\" else {
                    throw ValueSyntaxError(reason: "in a quoted value, a backslash must be followed by \" or \\")
                }
                value.append(escaped)
            } else {
                value.append(character)
            }
        }
        guard closed else { throw ValueSyntaxError(reason: "the quoted value has no closing quote") }
        let trailing = String(rest).trimmingWhitespace()
        guard trailing.isEmpty || trailing.hasPrefix("#") else {
            throw ValueSyntaxError(reason: "only a comment may follow the closing quote")
        }
        return value
    }

    /// The known key closest to a misspelt `key` (at most 3 edits), to suggest without echoing what was typed.
    static func nearestKey(to key: String) -> String? {
        let typed = Array(key.lowercased().utf8)
        guard !typed.isEmpty, typed.count <= 64 else { return nil }
        var best: (key: String, distance: Int)?
        for candidate in keys {
            let distance = editDistance(typed, Array(candidate.utf8))
            if distance <= 3 && distance < (best?.distance ?? .max) { best = (candidate, distance) }
        }
        return best?.key
    }

    private static func editDistance(_ a: [UInt8], _ b: [UInt8]) -> Int {
        var previous = Array(0...b.count)
        for i in 1...a.count {
            var current = [i] + Array(repeating: 0, count: b.count)
            for j in stride(from: 1, through: b.count, by: 1) {
                current[j] = Swift.min(previous[j] + 1, current[j - 1] + 1,
                                       previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            previous = current
        }
        return previous[b.count]
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
        case "pool_statistics":
            switch value.lowercased() {
            case "on", "true", "yes", "1": poolStatistics = true
            case "off", "false", "no", "0": poolStatistics = false
            default: throw .invalid(key: key, value: value, reason: "expected on or off")
            }
        case "hang_action":
            guard let action = HangAction(rawValue: value.lowercased()) else {
                throw .invalid(key: key, value: value, reason: "expected none or abort")
            }
            hangAction = action
        case "hang_abort_after_ms": hangAbortAfter = try milliseconds()
        case "systemd_watchdog":
            guard let mode = SystemdWatchdogMode(rawValue: value.lowercased()) else {
                throw .invalid(key: key, value: value, reason: "expected auto, on or off")
            }
            systemdWatchdog = mode
        case "systemd_hang_after_ms": systemdHangAfter = try milliseconds()
        case "control_socket":
            switch value.lowercased() {
            case "on", "true", "yes", "1": controlSocket = true
            case "off", "false", "no", "0": controlSocket = false
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
        case "upload_token_file": upload.tokenFile = value.isEmpty ? nil : value  // errors show it only if a path
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
