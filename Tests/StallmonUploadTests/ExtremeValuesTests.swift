import Foundation
import StallmonTestSupport
@testable import StallmonUpload
import Testing

/// Numbers a collector or a proxy sends are parsed with bounds: whatever the header says, the retry decision is a
/// clear outcome, never a trap (issue 41, item 1: `Retry-After: 99999999999` ended the process with "arithmetic
/// overflow" in `RetryPolicy.decide`, in the service's own uploader thread).
struct ExtremeValuesTests {
    static let second: UInt64 = 1_000_000_000
    static let cap = 300 * second
    /// 2026-11-28 00:00:00 UTC.
    static let now = 1_795_824_000

    static func decide(retryAfter: String, status: Int = 429, attempt: Int = 1, jitter: Double = 0.5,
                       now: Int = now) -> RetryPolicy.Decision {
        RetryPolicy.decide(.response(status: status, retryAfter: retryAfter, body: ""), attempt: attempt,
                           baseBackoff: second, maxBackoff: 60 * second, retryAfterCap: cap, jitter: jitter,
                           nowEpochSeconds: now)
    }

    static let extremeRetryAfters = [
        "99999999999", "9223372036854775807", "9223372036854775808", "99999999999999999999999999999999",
        "-1", "-9223372036854775808", "+5", "1e12", "inf", "NaN", "0x10", " 7 ", "", " ", "1.5", "٣",
        "Sun, 06 Nov 99999999999 08:49:37 GMT", "Sun, 06 Nov 9223372036854775807 08:49:37 GMT",
        "Sun, 06 Nov -9223372036854775808 08:49:37 GMT", "Sun, 99999999999999 Nov 2026 08:49:37 GMT",
        "Sun, 06 Nov 2026 99999999999999:49:37 GMT", "Sun, 06 Nov 2026 08:9223372036854775807:37 GMT",
        "Sun, 06 Nov 2026 08:49:-9223372036854775808 GMT", "Sun, 06 Nov 9999 23:59:60 GMT",
        "Sun, 06 Nov 0000 00:00:00 GMT", "Sun, 00 Nov 2026 08:49:37 GMT", "Sun, 06 Foo 2026 08:49:37 GMT",
    ]

    @Test(arguments: extremeRetryAfters)
    func anExtremeRetryAfterIsAWaitWithinTheCap(value: String) {
        guard case .retry(let after, let reason) = Self.decide(retryAfter: value) else {
            Issue.record("429 is retried whatever its Retry-After (\(value))")
            return
        }
        #expect(after <= Self.cap, "\(value)")
        #expect(reason == "HTTP 429")
    }

    @Test func hugeDelaysAreTheCapAndBadOnesTheBackoff() {
        let backoff = RetryPolicy.backoff(attempt: 1, base: Self.second, max: 60 * Self.second, jitter: 0.5)
        for huge in ["99999999999", "99999999999999999999999999999999", "Sun, 06 Nov 9999 23:59:60 GMT"] {
            #expect(Self.decide(retryAfter: huge) == .retry(afterNanoseconds: Self.cap, reason: "HTTP 429"), "\(huge)")
        }
        for bad in ["-1", "1e12", "inf", "NaN", "+5", "", "Sun, 06 Nov 99999999999 08:49:37 GMT",
                    "Sun, 06 Nov 2026 99999999999999:49:37 GMT"] {
            #expect(Self.decide(retryAfter: bad) == .retry(afterNanoseconds: backoff, reason: "HTTP 429"), "\(bad)")
        }
        #expect(Self.decide(retryAfter: " 7 ") == .retry(afterNanoseconds: 7 * Self.second, reason: "HTTP 429"))
        #expect(Self.decide(retryAfter: "Sun, 06 Nov 1994 08:49:37 GMT") == .retry(afterNanoseconds: 0,
                                                                                    reason: "HTTP 429"),
                "a date in the past is now")
    }

    /// Extreme clocks on this side too: the date arithmetic never overflows.
    @Test(arguments: [Int.min, -1, 0, Int.max])
    func extremeNowsAreClearOutcomes(now: Int) {
        for value in ["Sun, 06 Nov 9999 23:59:60 GMT", "Sun, 06 Nov 0000 00:00:00 GMT", "5"] {
            guard case .retry(let after, _) = Self.decide(retryAfter: value, now: now) else {
                Issue.record("\(value) at \(now)")
                continue
            }
            #expect(after <= Self.cap)
        }
    }

    /// Seeded random headers, attempts and jitters: 5,000 decisions, each a retry within max(cap, backoff max).
    @Test func seededRandomHeadersNeverTrap() {
        var generator = SeededRandom(seed: 41)
        let pieces = ["9", "99999999999999999999", "-", "+", " ", "GMT", "Sun,", "Nov", ":", "0", "60", "1e9", "nan",
                      "\u{0}", "é", "9223372036854775807"]
        for _ in 0..<5_000 {
            let count = Int.random(in: 0...8, using: &generator)
            let value = (0..<count).map { _ in pieces.randomElement(using: &generator)! }.joined(
                separator: Bool.random(using: &generator) ? " " : "")
            let attempt = [Int.min, -1, 0, 1, 31, 64, Int.max].randomElement(using: &generator)!
            let jitter = [-.infinity, -1, 0, 0.5, 1, 2, .infinity, .nan].randomElement(using: &generator)!
            guard case .retry(let after, _) = Self.decide(retryAfter: value, attempt: attempt, jitter: jitter) else {
                Issue.record("\(value)")
                continue
            }
            #expect(after <= max(Self.cap, 60 * Self.second), "\(value) attempt \(attempt) jitter \(jitter)")
        }
    }
}
