@testable import Stallmon
import Testing

/// The rate limit asked once per stall (`StallAdmission`), without a writer: a long stall counts once, its final
/// follows its interim, a hang's report is always written.
struct StallAdmissionTests {
    static let minute: UInt64 = 60 * 1_000_000_000
    typealias Decision = StallAdmission.Decision

    @Test func aStallIsDecidedAtItsFirstReportAndItsFinalFollows() {
        var admission = StallAdmission()
        // Limit 1 an hour: the first stall of a signature is written, the second suppressed at its interim, and
        // its final with it; the stall after the hour is written and says how many were suppressed.
        #expect(admission.final("a", signature: "S", alreadyPublished: false, limit: 1, now: 0)
                == Decision(write: true, suppressedBefore: 0))
        #expect(admission.interim("b", signature: "S", alreadyPublished: false, limit: 1, now: Self.minute)
                == Decision(write: false, suppressedBefore: 0))
        #expect(admission.interim("b", signature: "S", alreadyPublished: false, limit: 1, now: 2 * Self.minute)
                == Decision(write: false, suppressedBefore: 0), "asked once: a second interim is not a new stall")
        #expect(admission.final("b", signature: "S", alreadyPublished: false, limit: 1, now: 3 * Self.minute)
                == Decision(write: false, suppressedBefore: 0))
        #expect(admission.final("c", signature: "S", alreadyPublished: false, limit: 1, now: 61 * Self.minute)
                == Decision(write: true, suppressedBefore: 1))
    }

    @Test func aWrittenInterimsFinalIsWrittenWithoutAskingAgain() {
        var admission = StallAdmission()
        #expect(admission.interim("a", signature: "S", alreadyPublished: false, limit: 1, now: 0)?.write == true)
        #expect(admission.final("a", signature: "S", alreadyPublished: true, limit: 1, now: Self.minute)?.write
                == true, "the limit was asked at the interim: the final is not a second stall")
        #expect(admission.final("b", signature: "S", alreadyPublished: false, limit: 1, now: Self.minute)?.write
                == false, "the next stall is")
    }

    @Test func aHangsReportIsAlwaysWrittenAndSoIsWhatFollowsIt() {
        var admission = StallAdmission()
        _ = admission.final("a", signature: "S", alreadyPublished: false, limit: 1, now: 0)
        #expect(admission.interim("b", signature: "S", alreadyPublished: false, limit: 1, now: 1)?.write == false)
        #expect(admission.hang("b") == Decision(write: true, suppressedBefore: 0))
        #expect(admission.final("b", signature: "S", alreadyPublished: true, limit: 1, now: 2)?.write == true)
    }

    @Test func withoutASignatureOrAfterAPublishedReportThereIsNoDecision() {
        var admission = StallAdmission()
        #expect(admission.interim("a", signature: nil, alreadyPublished: false, limit: 1, now: 0) == nil)
        #expect(admission.final("a", signature: "S", alreadyPublished: true, limit: 1, now: 0) == nil)
        #expect(admission.final("b", signature: nil, alreadyPublished: false, limit: 1, now: 0) == nil)
    }
}
