import Foundation

/// Where and how reports are uploaded. Off unless `endpoint` is set (or `spool` is forced on for a separate
/// `stallmon upload --daemon`). Printing it never shows the token.
public struct UploadConfiguration: Sendable, Equatable, CustomStringConvertible, CustomReflectable {
    /// Collector URL, http or https. OTLP: the base (`/v1/logs` is appended); NDJSON: the full URL.
    /// Key `upload_endpoint`; empty: no in-process uploader.
    public var endpoint: String?
    /// Key `upload_format`: `otlp` (default) or `ndjson`.
    public var format: UploadFormat = .otlp
    /// Key `upload_signals`: what an OTLP batch is sent as, `logs` (default), `profiles`, or both. A batch leaves
    /// the spool only once every signal was acknowledged.
    public var signals: Set<UploadSignal> = [.logs]
    /// Key `spool`: queue reports for upload. Default: on when `endpoint` is set.
    public var spool: Bool?
    /// Bearer token (key `upload_token`, or `STALLMON_UPLOAD_TOKEN`). Never printed or logged.
    public var token: String?
    /// A file holding the bearer token (key `upload_token_file`), read at start.
    public var tokenFile: String?
    /// Extra request headers (key `upload_headers`: `Name: value, Other: value`).
    public var headers: [Header] = []
    /// `service.name` for OTLP (key `service_name`; default: the executable's name).
    public var serviceName: String?
    /// A batch is due at this many reports (key `upload_batch_max_reports`, default 100) …
    public var batchMaxReports = 100
    /// … or this long after its oldest report (key `upload_batch_max_age_ms`, default 5000).
    public var batchMaxAge: Duration = .seconds(5)
    /// Largest request body before compression (key `upload_max_body_bytes`, default 4 MiB).
    public var maxBodyBytes = 4 << 20
    /// Per-request timeout (key `upload_timeout_ms`, default 10000).
    public var requestTimeout: Duration = .seconds(10)
    /// First retry delay, doubled per failure up to `backoffMax` (keys `upload_backoff_ms` 500,
    /// `upload_backoff_max_ms` 60000); `Retry-After` is honoured up to `retryAfterCap` (`upload_retry_after_max_ms`,
    /// 300000).
    public var backoffBase: Duration = .milliseconds(500)
    public var backoffMax: Duration = .seconds(60)
    public var retryAfterCap: Duration = .seconds(300)
    /// Spool quotas: beyond them the oldest pending reports are dropped (keys `spool_max_reports` 10000,
    /// `spool_max_bytes` 256 MiB, `spool_max_age_hours` 168).
    public var spoolMaxReports = 10_000
    public var spoolMaxBytes = 256 << 20
    public var spoolMaxAge: Duration = .seconds(7 * 24 * 3600)
    /// Bounds of `spool/rejected/` (what collectors refused, kept to be looked at): beyond them the oldest refused
    /// reports are removed, with their reasons (keys `rejected_max_reports` 1000, `rejected_max_bytes` 64 MiB,
    /// `rejected_max_age_hours` 720).
    public var rejectedMaxReports = 1_000
    public var rejectedMaxBytes = 64 << 20
    public var rejectedMaxAge: Duration = .seconds(30 * 24 * 3600)

    public struct Header: Sendable, Equatable {
        public var name: String
        public var value: String

        public init(name: String, value: String) {
            self.name = name
            self.value = value
        }
    }

    public init() {}

    /// Whether reports are queued in the spool.
    public var spoolEnabled: Bool { spool ?? (endpoint != nil) }

    public var description: String {
        "UploadConfiguration(endpoint: \(endpoint.map { Self.redacted(endpoint: $0) } ?? "none"), "
            + "format: \(format.rawValue), signals: \(signals.sorted().map(\.rawValue).joined(separator: ",")), "
            + "spool: \(spoolEnabled), "
            + "token: \(token == nil && tokenFile == nil ? "none" : "<redacted>"), headers: "
            + headers.map { "\($0.name): <redacted>" }.joined(separator: ", ") + ")"
    }

    public var customMirror: Mirror {
        Mirror(self, children: ["description": description])
    }

    /// Checks the endpoint, limits and token file; errors name the key and never show secrets.
    public func validate() throws(ConfigurationError) {
        try validateEndpoint()
        guard !signals.isEmpty else {
            throw .invalid(key: "upload_signals", value: "", reason: "expected logs, profiles or logs,profiles")
        }
        guard format == .otlp || signals == [.logs] else {
            throw .invalid(key: "upload_signals", value: signals.sorted().map(\.rawValue).joined(separator: ","),
                           reason: "profiles are OTLP only: set upload_format = otlp")
        }
        guard batchMaxReports >= 1 else {
            throw .invalid(key: "upload_batch_max_reports", value: "\(batchMaxReports)", reason: "must be at least 1")
        }
        guard batchMaxAge >= .zero else {
            throw .invalid(key: "upload_batch_max_age_ms", value: "\(batchMaxAge.milliseconds)",
                           reason: "must not be negative")
        }
        guard maxBodyBytes >= 1024 else {
            throw .invalid(key: "upload_max_body_bytes", value: "\(maxBodyBytes)", reason: "must be at least 1024")
        }
        guard requestTimeout > .zero, backoffBase > .zero, backoffMax >= backoffBase, retryAfterCap > .zero else {
            throw ConfigurationError("invalid upload timing: upload_timeout_ms, upload_backoff_ms and "
                + "upload_retry_after_max_ms must be > 0 and upload_backoff_max_ms >= upload_backoff_ms")
        }
        guard spoolMaxReports >= 1, spoolMaxBytes >= 1024, spoolMaxAge > .zero else {
            throw ConfigurationError("invalid spool quota: spool_max_reports >= 1, spool_max_bytes >= 1024, "
                + "spool_max_age_hours > 0")
        }
        guard rejectedMaxReports >= 1, rejectedMaxBytes >= 1024, rejectedMaxAge > .zero else {
            throw ConfigurationError("invalid rejected/ bounds: rejected_max_reports >= 1, rejected_max_bytes >= "
                + "1024, rejected_max_age_hours > 0")
        }
        for (index, header) in headers.enumerated()
        where header.name.isEmpty || header.name.contains(where: { $0 == ":" || $0.isWhitespace }) {
            // Not shown: `Bearer abc: …` would be a secret typed without its header name.
            throw .invalid(key: "upload_headers", value: "<entry \(index + 1)>",
                           reason: "not a valid header name (the entry is not shown)")
        }
        for header in headers where !Self.isValidFieldValue(header.value) {
            throw ConfigurationError("invalid upload_headers: the value of \(header.name) contains a control character "
                + "or a newline (the value is not shown)")
        }
        _ = try resolvedToken()
    }

    /// Checks `endpoint`: an http or https URL with a host. The error shows it without credentials or query.
    func validateEndpoint() throws(ConfigurationError) {
        guard let endpoint else { return }
        guard let url = URL(string: endpoint), let scheme = url.scheme?.lowercased(),
              scheme == "http" || scheme == "https", let host = url.host, !host.isEmpty else {
            throw .invalid(key: "upload_endpoint", value: Self.redacted(endpoint: endpoint),
                           reason: "expected an http:// or https:// URL with a host")
        }
    }

    /// An HTTP field value (RFC 9110): visible characters, spaces and tabs; no control characters or newlines,
    /// which would otherwise fail every request (and end up in error messages).
    static func isValidFieldValue(_ value: String) -> Bool {
        value.unicodeScalars.allSatisfy { $0 == "\t" || ($0.value >= 0x20 && $0.value != 0x7F) }
    }

    /// `endpoint` as logs and errors may show it: without user, password, query or fragment.
    public static func redacted(endpoint: String) -> String {
        guard var components = URLComponents(string: endpoint) else { return "<unparsable URL>" }
        let hadSecrets = components.user != nil || components.password != nil || components.query != nil
            || components.fragment != nil
        components.user = nil
        components.password = nil
        components.query = nil
        components.fragment = nil
        return (components.string ?? "<unparsable URL>") + (hadSecrets ? " (credentials and query not shown)" : "")
    }

    /// The bearer token from `token` or `tokenFile` (trimmed), or nil.
    package func resolvedToken() throws(ConfigurationError) -> String? {
        if let token, !token.isEmpty {
            guard Self.isValidFieldValue(token) else {
                throw ConfigurationError("invalid upload_token: contains a control character or a newline "
                    + "(the value is not shown)")
            }
            return token
        }
        guard let tokenFile, !tokenFile.isEmpty else { return nil }
        // The path is shown only when it looks like one: a token pasted here by mistake must not be echoed.
        let shown = tokenFile.contains("/") ? tokenFile : "(the value is not shown: it is no path, it may be a token)"
        guard let text = try? String(contentsOfFile: tokenFile, encoding: .utf8) else {
            throw ConfigurationError("cannot read upload_token_file \(shown)")
        }
        let trimmed = text.trimmingWhitespace()
        guard !trimmed.isEmpty else { throw ConfigurationError("upload_token_file \(shown) is empty") }
        guard Self.isValidFieldValue(trimmed) else {
            throw ConfigurationError("upload_token_file \(shown): the token contains a control character or a "
                + "newline (the value is not shown)")
        }
        return trimmed
    }

    /// Parses `Name: value, Other: value`.
    static func parseHeaders(_ text: String) throws(ConfigurationError) -> [Header] {
        var headers: [Header] = []
        for (index, part) in text.split(separator: ",").enumerated() {
            let pair = part.split(separator: ":", maxSplits: 1)
            guard pair.count == 2 else {
                // The entry itself is not echoed: it may be a secret typed without its name.
                throw .invalid(key: "upload_headers", value: "<entry \(index + 1)>", reason: "expected `Name: value`")
            }
            let header = Header(name: String(pair[0]).trimmingWhitespace(), value: String(pair[1]).trimmingWhitespace())
            guard isValidFieldValue(header.value) else {
                throw ConfigurationError("invalid upload_headers: the value of \(header.name) contains a control "
                    + "character or a newline (the value is not shown)")
            }
            headers.append(header)
        }
        return headers
    }
}
