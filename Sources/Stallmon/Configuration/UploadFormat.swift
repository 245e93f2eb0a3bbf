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

/// What an OTLP upload sends each batch as (key `upload_signals`, a comma list; default `logs`).
public enum UploadSignal: String, Sendable, CaseIterable, Comparable {
    /// OTLP logs: one LogRecord per stall, the whole story (`POST {endpoint}/v1/logs`).
    case logs
    /// OTLP profiles (`profiles/v1development`, an alpha signal): the stalls' samples as stall time by stack,
    /// protobuf-encoded (`POST {endpoint}/v1development/profiles`), for profile stores behind the Collector.
    case profiles

    public static func < (lhs: UploadSignal, rhs: UploadSignal) -> Bool {
        allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
    }

    /// The URL a configured OTLP `endpoint` (its base, or its `/v1/logs` URL) receives profiles at.
    package static func profilesURL(for endpoint: String) -> String {
        var trimmed = endpoint.hasSuffix("/") ? String(endpoint.dropLast()) : endpoint
        if trimmed.hasSuffix("/v1/logs") { trimmed = String(trimmed.dropLast("/v1/logs".count)) }
        return trimmed.hasSuffix("/v1development/profiles") ? trimmed : trimmed + "/v1development/profiles"
    }

    /// `logs`, `profiles` or `logs,profiles` (spaces allowed, order and repeats free); nil for anything else.
    package static func parseList(_ value: String) -> Set<UploadSignal>? {
        let names = value.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        guard !names.isEmpty else { return nil }
        var signals: Set<UploadSignal> = []
        for name in names {
            guard let signal = UploadSignal(rawValue: name.lowercased()) else { return nil }
            signals.insert(signal)
        }
        return signals
    }
}
