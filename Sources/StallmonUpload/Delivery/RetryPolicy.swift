import Foundation
import Stallmon
import StallmonReport

/// The OTLP/HTTP retry rules.
enum RetryPolicy {
    enum Decision: Equatable {
        /// 2xx: delete the batch from the spool. `rejectedRecords` from an OTLP partialSuccess.
        case delivered(rejectedRecords: Int, message: String?)
        /// 429, 502, 503, 504 or no answer: keep the batch, retry after this many nanoseconds.
        case retry(afterNanoseconds: UInt64, reason: String)
        /// Any other status: never retried; the batch moves to rejected/ (401, 403 and 404 are retried: see
        /// `configurationStatuses`).
        case reject(reason: String)
    }

    static let retryableStatuses: Set<Int> = [429, 502, 503, 504]
    /// The sender's configuration, not the reports, is at fault: a token being rotated (401, 403) or an endpoint
    /// path being moved (404). Rejecting would move the whole spool to rejected/ within seconds, so these are kept
    /// and retried with backoff until the configuration works (OTLP's spec rejects them; losing reports is worse).
    static let configurationStatuses: Set<Int> = [401, 403, 404]

    /// `attempt` counts consecutive failed tries (1 for the first failure); `jitter` in [0, 1) comes from the
    /// caller so the decision stays deterministic. `nowEpochSeconds` resolves an HTTP-date Retry-After.
    static func decide(_ outcome: DeliveryOutcome, attempt: Int, baseBackoff: UInt64, maxBackoff: UInt64,
                       retryAfterCap: UInt64, jitter: Double, nowEpochSeconds: Int) -> Decision {
        switch outcome {
        case .transportFailure(let reason):
            return .retry(afterNanoseconds: backoff(attempt: attempt, base: baseBackoff, max: maxBackoff,
                                                    jitter: jitter), reason: reason)
        case .response(let status, let retryAfter, let body, _):
            if (200..<300).contains(status) {
                let partial = OTLPPartialSuccess.parse(body)
                return .delivered(rejectedRecords: partial?.rejected ?? 0, message: partial?.message)
            }
            if retryableStatuses.contains(status) {
                var wait = backoff(attempt: attempt, base: baseBackoff, max: maxBackoff, jitter: jitter)
                if let retryAfter, let seconds = parseRetryAfter(retryAfter, nowEpochSeconds: nowEpochSeconds) {
                    // The collector's number, saturated: a header of any size is a wait of at most the cap.
                    let nanoseconds = UInt64(seconds).multipliedReportingOverflow(by: 1_000_000_000)
                    wait = nanoseconds.overflow ? retryAfterCap : min(nanoseconds.partialValue, retryAfterCap)
                }
                return .retry(afterNanoseconds: wait, reason: "HTTP \(status)")
            }
            if configurationStatuses.contains(status) {
                let excerpt = String(body.prefix(200))
                return .retry(afterNanoseconds: backoff(attempt: attempt, base: baseBackoff, max: maxBackoff,
                                                        jitter: jitter),
                              reason: "HTTP \(status) (check the endpoint and token; kept and retried)"
                                  + (excerpt.isEmpty ? "" : ": \(excerpt)"))
            }
            let excerpt = String(body.prefix(512))
            return .reject(reason: "HTTP \(status)" + (excerpt.isEmpty ? "" : ": \(excerpt)"))
        }
    }

    /// Exponential backoff with full jitter in [half, full] of base·2^(attempt-1), capped. Saturating throughout: an
    /// overflowing product is the cap, and a jitter outside [0, 1] (NaN included) is clamped to it.
    static func backoff(attempt: Int, base: UInt64, max: UInt64, jitter: Double) -> UInt64 {
        let exponent = attempt <= 1 ? 0 : Swift.min(attempt - 1, 30)
        let product = base.multipliedReportingOverflow(by: UInt64(1) << UInt64(exponent))
        let full = product.overflow ? max : Swift.min(product.partialValue, max)
        let fraction = jitter.isNaN ? 0 : Swift.min(Swift.max(jitter, 0), 1)
        return full / 2 + UInt64(Double(full / 2) * fraction).clampedToHalf(of: full)
    }

    /// Retry-After as delta-seconds or an IMF-fixdate (RFC 9110). Returns seconds from now (≥ 0), or nil for a value
    /// that is neither. Delta-seconds too large for an `Int` saturate to `Int.max` (the caller caps the wait); a date
    /// in the past is now. Never traps, whatever the collector sent.
    static func parseRetryAfter(_ value: String, nowEpochSeconds: Int) -> Int? {
        let trimmed = value.trimmingWhitespace()
        if !trimmed.isEmpty, trimmed.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) {
            return Int(trimmed) ?? Int.max
        }
        guard let date = HTTPDate.parse(trimmed) else { return nil }
        let (seconds, overflow) = date.subtractingReportingOverflow(nowEpochSeconds)
        return overflow ? (date > 0 ? Int.max : 0) : Swift.max(0, seconds)
    }
}

/// What happened to one request.
enum DeliveryOutcome: Equatable {
    /// `body`: the answer's first 4 KiB as text (errors quote it); `bytes`: the same, as sent (a protobuf answer).
    case response(status: Int, retryAfter: String?, body: String, bytes: [UInt8] = [])
    /// Connection refused or reset, DNS, TLS, timeout: no HTTP answer.
    case transportFailure(String)
}

private extension UInt64 {
    /// At most half of `full`: a Double product of `full / 2` and a fraction in [0, 1] can round up past it.
    func clampedToHalf(of full: UInt64) -> UInt64 { Swift.min(self, full / 2) }
}
