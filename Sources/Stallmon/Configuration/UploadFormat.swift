/// The wire formats of an upload batch.
public enum UploadFormat: String, Sendable, CaseIterable {
    /// OTLP/HTTP logs, JSON encoding: `POST {endpoint}/v1/logs`, one LogRecord per stall.
    case otlp
    /// Newline-delimited JSON: `POST {endpoint}`, one report per line.
    case ndjson

    package var contentType: String { self == .otlp ? "application/json" : "application/x-ndjson" }

    /// The URL to POST to for a configured endpoint.
    package func url(for endpoint: String) -> String {
        guard self == .otlp else { return endpoint }
        let trimmed = endpoint.hasSuffix("/") ? String(endpoint.dropLast()) : endpoint
        return trimmed.hasSuffix("/v1/logs") ? trimmed : trimmed + "/v1/logs"
    }
}
