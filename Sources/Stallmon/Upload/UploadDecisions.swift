/// The uploader's decisions as pure functions over an injected clock: which spool entries the quotas drop, when a
/// batch is due and what it holds, and what an HTTP outcome means under the OTLP retry rules. The uploader thread
/// only carries them out.

/// One report waiting in the spool.
public struct SpoolEntry: Sendable, Equatable {
    /// File name in `pending/` (chronological: it begins with the stall's UTC start).
    public var name: String
    public var bytes: Int
    /// When it was spooled, nanoseconds since the Unix epoch (the report file's mtime).
    public var spooledAt: UInt64
}

/// Spool quotas: beyond them the oldest reports are dropped.
public struct SpoolLimits: Sendable, Equatable {
    public var maxReports: Int
    public var maxBytes: Int
    public var maxAgeNanoseconds: UInt64

    public init(maxReports: Int, maxBytes: Int, maxAgeNanoseconds: UInt64) {
        self.maxReports = maxReports
        self.maxBytes = maxBytes
        self.maxAgeNanoseconds = maxAgeNanoseconds
    }
}

enum SpoolQuota {
    /// The entries to drop, oldest first, so that what remains is within `limits` at `now`. `entries` must be sorted
    /// oldest first.
    static func entriesToDrop(_ entries: [SpoolEntry], limits: SpoolLimits, now: UInt64) -> [SpoolEntry] {
        var drop: [SpoolEntry] = []
        var remaining = entries[...]
        var bytes = entries.reduce(0) { $0 + $1.bytes }
        while let oldest = remaining.first {
            let tooOld = now > oldest.spooledAt && now - oldest.spooledAt > limits.maxAgeNanoseconds
            guard tooOld || remaining.count > limits.maxReports || bytes > limits.maxBytes else { break }
            drop.append(oldest)
            bytes -= oldest.bytes
            remaining = remaining.dropFirst()
        }
        return drop
    }
}

/// When a batch is due and which entries it takes.
struct BatchPlan: Equatable {
    enum Decision: Equatable {
        /// Nothing pending.
        case idle
        /// Send these now.
        case send([SpoolEntry])
        /// Wait until this time (epoch ns) for more reports.
        case wait(until: UInt64)
        /// This entry alone exceeds the body limit: it can never be sent.
        case tooLarge(SpoolEntry)
    }

    var maxReports: Int
    var maxAgeNanoseconds: UInt64
    var maxBodyBytes: Int

    /// A batch is due at `maxReports` entries or `maxAgeNanoseconds` after its oldest, whichever comes first (or at
    /// once when `flush`), and never holds more than `maxBodyBytes` of reports.
    func decide(_ pending: [SpoolEntry], now: UInt64, flush: Bool) -> Decision {
        guard let oldest = pending.first else { return .idle }
        if oldest.bytes > maxBodyBytes { return .tooLarge(oldest) }
        let dueAt = oldest.spooledAt &+ maxAgeNanoseconds
        guard flush || pending.count >= maxReports || now >= dueAt else { return .wait(until: dueAt) }
        var batch: [SpoolEntry] = []
        var bytes = 0
        for entry in pending.prefix(maxReports) {
            if bytes + entry.bytes > maxBodyBytes { break }
            batch.append(entry)
            bytes += entry.bytes
        }
        return .send(batch)
    }
}

/// What happened to one request.
enum DeliveryOutcome: Equatable {
    case response(status: Int, retryAfter: String?, body: String)
    /// Connection refused or reset, DNS, TLS, timeout: no HTTP answer.
    case transportFailure(String)
}

/// The OTLP/HTTP retry rules.
enum RetryPolicy {
    enum Decision: Equatable {
        /// 2xx: delete the batch from the spool. `rejectedRecords` from an OTLP partialSuccess.
        case delivered(rejectedRecords: Int, message: String?)
        /// 429, 502, 503, 504 or no answer: keep the batch, retry after this many nanoseconds.
        case retry(afterNanoseconds: UInt64, reason: String)
        /// Any other status: never retried; the batch moves to rejected/.
        case reject(reason: String)
    }

    static let retryableStatuses: Set<Int> = [429, 502, 503, 504]

    /// `attempt` counts consecutive failed tries (1 for the first failure); `jitter` in [0, 1) comes from the
    /// caller so the decision stays deterministic. `nowEpochSeconds` resolves an HTTP-date Retry-After.
    static func decide(_ outcome: DeliveryOutcome, attempt: Int, baseBackoff: UInt64, maxBackoff: UInt64,
                       retryAfterCap: UInt64, jitter: Double, nowEpochSeconds: Int) -> Decision {
        switch outcome {
        case .transportFailure(let reason):
            return .retry(afterNanoseconds: backoff(attempt: attempt, base: baseBackoff, max: maxBackoff,
                                                    jitter: jitter), reason: reason)
        case .response(let status, let retryAfter, let body):
            if (200..<300).contains(status) {
                let partial = OTLPPartialSuccess.parse(body)
                return .delivered(rejectedRecords: partial?.rejected ?? 0, message: partial?.message)
            }
            if retryableStatuses.contains(status) {
                var wait = backoff(attempt: attempt, base: baseBackoff, max: maxBackoff, jitter: jitter)
                if let retryAfter, let seconds = parseRetryAfter(retryAfter, nowEpochSeconds: nowEpochSeconds) {
                    wait = min(UInt64(seconds) * 1_000_000_000, retryAfterCap)
                }
                return .retry(afterNanoseconds: wait, reason: "HTTP \(status)")
            }
            let excerpt = String(body.prefix(512))
            return .reject(reason: "HTTP \(status)" + (excerpt.isEmpty ? "" : ": \(excerpt)"))
        }
    }

    /// Exponential backoff with full jitter in [half, full] of base·2^(attempt-1), capped.
    static func backoff(attempt: Int, base: UInt64, max: UInt64, jitter: Double) -> UInt64 {
        let exponent = Swift.min(Swift.max(attempt - 1, 0), 30)
        let full = Swift.min(base.multipliedReportingOverflow(by: UInt64(1) << UInt64(exponent)).partialValue, max)
        return full / 2 + UInt64(Double(full / 2) * Swift.min(Swift.max(jitter, 0), 1))
    }

    /// Retry-After as delta-seconds or an IMF-fixdate (RFC 9110). Returns seconds from now (≥ 0), or nil.
    static func parseRetryAfter(_ value: String, nowEpochSeconds: Int) -> Int? {
        let trimmed = value.trimmingWhitespace()
        if let seconds = Int(trimmed) { return seconds >= 0 ? seconds : nil }
        guard let date = HTTPDate.parse(trimmed) else { return nil }
        return Swift.max(0, date - nowEpochSeconds)
    }
}

/// `partialSuccess` of an OTLP ExportLogsServiceResponse.
struct OTLPPartialSuccess: Decodable {
    var rejected: Int
    var message: String?

    static func parse(_ body: String) -> OTLPPartialSuccess? {
        struct Response: Decodable {
            struct Partial: Decodable {
                var rejectedLogRecords: FlexibleInt?
                var errorMessage: String?
            }
            var partialSuccess: Partial?
        }
        guard !body.isEmpty, let data = body.data(using: .utf8),
              let response = try? JSONDecoder().decode(Response.self, from: data),
              let partial = response.partialSuccess else { return nil }
        let count = partial.rejectedLogRecords?.value ?? 0
        let message = partial.errorMessage.flatMap { $0.isEmpty ? nil : $0 }
        return count == 0 && message == nil ? nil : OTLPPartialSuccess(rejected: count, message: message)
    }
}

/// An int64 as the OTLP JSON mapping writes it: a string, though a number is accepted too.
struct FlexibleInt: Decodable {
    var value: Int
    init(from decoder: Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let number = try? container.decode(Int.self) {
            value = number
        } else {
            value = Int(try container.decode(String.self)) ?? 0
        }
    }
}

/// IMF-fixdate, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
enum HTTPDate {
    static func parse(_ text: String) -> Int? {
        let parts = text.split(separator: " ")
        guard parts.count == 6, parts[5] == "GMT", let day = Int(parts[1]), let year = Int(parts[3]) else {
            return nil
        }
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        guard let monthIndex = months.firstIndex(of: String(parts[2])) else { return nil }
        let clock = parts[4].split(separator: ":").compactMap { Int($0) }
        guard clock.count == 3 else { return nil }
        // Days from civil (Howard Hinnant's algorithm).
        let month = monthIndex + 1
        let shiftedYear = month <= 2 ? year - 1 : year
        let era = (shiftedYear >= 0 ? shiftedYear : shiftedYear - 399) / 400
        let yearOfEra = shiftedYear - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        return days * 86_400 + clock[0] * 3600 + clock[1] * 60 + clock[2]
    }
}

import Foundation
