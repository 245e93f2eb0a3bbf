import Foundation
@testable import Stallmon
@testable import StallmonReport
import StallmonTestSupport
@testable import StallmonUpload
import Testing

struct UploadDecisionTests {
    let second: UInt64 = 1_000_000_000

    func entries(_ count: Int, bytes: Int = 100, spacing: UInt64 = 1_000_000_000) -> [SpoolEntry] {
        (0..<count).map { SpoolEntry(name: "stall-\($0).json", bytes: bytes, spooledAt: UInt64($0) * spacing) }
    }

    @Test func quotasDropOldestByCountBytesAndAge() {
        let limits = SpoolLimits(maxReports: 3, maxBytes: 10_000, maxAgeNanoseconds: 100 * second)
        #expect(SpoolQuota.entriesToDrop(entries(5), limits: limits, now: 5 * second).map(\.name)
            == ["stall-0.json", "stall-1.json"])
        let byBytes = SpoolLimits(maxReports: 100, maxBytes: 250, maxAgeNanoseconds: 100 * second)
        #expect(SpoolQuota.entriesToDrop(entries(4), limits: byBytes, now: 5 * second).count == 2)
        let byAge = SpoolLimits(maxReports: 100, maxBytes: 10_000, maxAgeNanoseconds: 2 * second)
        #expect(SpoolQuota.entriesToDrop(entries(4), limits: byAge, now: 4 * second).map(\.name)
            == ["stall-0.json", "stall-1.json"])
        #expect(SpoolQuota.entriesToDrop(entries(2), limits: limits, now: 3 * second).isEmpty)
    }

    /// One quota rule with the report directory's (`OldestFirstQuota`): an entry too old is dropped wherever it stands
    /// in name order (a long stall's final is spooled after a later, shorter stall's report); the spool's loop
    /// stopped at the first entry within the limits, keeping it past its age.
    @Test func aTooOldEntryIsDroppedWhereverItStands() {
        let limits = SpoolLimits(maxReports: 100, maxBytes: 10_000, maxAgeNanoseconds: 10 * second)
        let spooled = [SpoolEntry(name: "stall-0.json", bytes: 100, spooledAt: 30 * second),
                       SpoolEntry(name: "stall-1.json", bytes: 100, spooledAt: 5 * second),
                       SpoolEntry(name: "stall-2.json", bytes: 100, spooledAt: 31 * second)]
        #expect(SpoolQuota.entriesToDrop(spooled, limits: limits, now: 32 * second).map(\.name) == ["stall-1.json"])
    }

    @Test func aBatchIsDueAtCountOrAgeAndRespectsTheBodyLimit() {
        let plan = BatchPlan(maxReports: 3, maxAgeNanoseconds: 10 * second, maxBodyBytes: 250)
        #expect(plan.decide([], now: 0, flush: false) == .idle)
        #expect(plan.decide(entries(2), now: 5 * second, flush: false) == .wait(until: 10 * second))
        #expect(plan.decide(entries(2), now: 10 * second, flush: false) == .send(Array(entries(2))))
        #expect(plan.decide(entries(2), now: 1, flush: true) == .send(Array(entries(2))))
        let five = entries(5)
        #expect(plan.decide(five, now: 0, flush: false) == .send(Array(five.prefix(2))), "250 bytes hold two")
        let huge = [SpoolEntry(name: "big", bytes: 1000, spooledAt: 0)]
        #expect(plan.decide(huge, now: 0, flush: true) == .tooLarge(huge[0]))
    }

    @Test func theOTLPRetryRules() {
        func decide(_ outcome: DeliveryOutcome, attempt: Int = 1) -> RetryPolicy.Decision {
            RetryPolicy.decide(outcome, attempt: attempt, baseBackoff: second, maxBackoff: 8 * second,
                               retryAfterCap: 60 * second, jitter: 0.5, nowEpochSeconds: 784_111_777)
        }
        #expect(decide(.response(status: 200, retryAfter: nil, body: "{}")) == .delivered(rejectedRecords: 0,
                                                                                           message: nil))
        let partial = #"{"partialSuccess":{"rejectedLogRecords":"2","errorMessage":"bad"}}"#
        #expect(decide(.response(status: 200, retryAfter: nil, body: partial)) == .delivered(rejectedRecords: 2,
                                                                                              message: "bad"))
        for status in [429, 502, 503, 504] {
            guard case .retry = decide(.response(status: status, retryAfter: nil, body: "")) else {
                Issue.record("\(status) must be retried")
                continue
            }
        }
        // Issue 26 (9): an authentication failure or a wrong path is the sender's configuration, being fixed (a
        // token rotation): kept and retried, not rejected with the whole spool.
        for status in [401, 403, 404] {
            guard case .retry(let after, let reason) = decide(.response(status: status, retryAfter: nil, body: "no")) else {
                Issue.record("\(status) must be kept and retried")
                continue
            }
            #expect(after == 750_000_000)
            #expect(reason.hasPrefix("HTTP \(status) (check the endpoint and token"))
        }
        for status in [400, 413, 500, 501] {
            guard case .reject(let reason) = decide(.response(status: status, retryAfter: nil, body: "why")) else {
                Issue.record("\(status) must not be retried")
                continue
            }
            #expect(reason == "HTTP \(status): why")
        }
        #expect(decide(.response(status: 429, retryAfter: "7", body: "")) == .retry(afterNanoseconds: 7 * second,
                                                                                      reason: "HTTP 429"))
        #expect(decide(.response(status: 503, retryAfter: "Sun, 06 Nov 1994 08:49:47 GMT", body: ""))
            == .retry(afterNanoseconds: 10 * second, reason: "HTTP 503"), "HTTP-date 10 s after now")
        #expect(decide(.response(status: 503, retryAfter: "86400", body: "")) == .retry(afterNanoseconds: 60 * second,
                                                                                         reason: "HTTP 503"),
                "capped")
        #expect(decide(.transportFailure("refused")) == .retry(afterNanoseconds: 750_000_000, reason: "refused"))
    }

    @Test func backoffGrowsWithJitterAndIsCapped() {
        for attempt in 1...10 {
            let full = min(UInt64(1) << UInt64(attempt - 1), 8) * second
            let low = RetryPolicy.backoff(attempt: attempt, base: second, max: 8 * second, jitter: 0)
            let high = RetryPolicy.backoff(attempt: attempt, base: second, max: 8 * second, jitter: 0.999_999)
            #expect(low == full / 2)
            #expect(high <= full && high > full * 9 / 10)
        }
    }

    @Test func configurationErrorsNeverShowTheToken() {
        var configuration = UploadConfiguration()
        configuration.endpoint = "http://collector:4318"
        configuration.token = "very-secret"
        #expect(!"\(configuration)".contains("very-secret"))
        var dumped = ""
        dump(configuration, to: &dumped)
        #expect(!dumped.contains("very-secret"))
        configuration.endpoint = "collector:4318"
        #expect(throws: ConfigurationError.self) { try configuration.validate() }
        configuration.endpoint = "http://collector:4318"
        configuration.token = nil
        configuration.tokenFile = "/nonexistent/token"
        #expect(throws: ConfigurationError("cannot read upload_token_file /nonexistent/token")) {
            try configuration.validate()
        }
    }
}
