@testable import Stallmon
import Testing

/// When the pool's starvation tracker sends its canary, begins, samples and ends a starvation: pure, pass by pass.
struct StarvationDecisionTests {
    static let ms: UInt64 = 1_000_000
    /// A 100 ms threshold, culprits sampled every 10 ms.
    static func decision() -> StarvationDecision {
        StarvationDecision(threshold: 100 * ms, sampleInterval: 10 * ms)
    }

    @Test func aPoolWithRoomSendsNothing() {
        var decision = Self.decision()
        let pass = decision.pass(now: 1_000 * Self.ms, saturated: false, canary: .none)
        #expect(pass.action == nil && pass.wakeAt == 1_075 * Self.ms, "looks again at the idle poll, three quarters of a threshold later")
        let roomy = decision.pass(now: 1_050 * Self.ms, saturated: false, canary: .waiting(sent: 900 * Self.ms))
        #expect(roomy.action == nil, "a canary waiting in a pool with room is no starvation")
        #expect(!decision.isStarving)
    }

    @Test func aSaturatedPoolSendsTheCanaryAndWaitsAThresholdForIt() {
        var decision = Self.decision()
        let sent = decision.pass(now: 1_000 * Self.ms, saturated: true, canary: .none)
        #expect(sent.action == .sendCanary && sent.wakeAt == 1_010 * Self.ms)
        let waiting = decision.pass(now: 1_010 * Self.ms, saturated: true, canary: .waiting(sent: 1_000 * Self.ms))
        #expect(waiting.action == nil && waiting.wakeAt == 1_100 * Self.ms, "until the canary waited a threshold")
        #expect(!decision.isStarving)
        // A canary that began (an earlier one) is no reason to wait: another is sent.
        var again = Self.decision()
        let after = again.pass(now: 2_000 * Self.ms, saturated: true,
                               canary: .ran(sent: 1_000 * Self.ms, started: 1_001 * Self.ms))
        #expect(after.action == .sendCanary)
    }

    @Test func aCanaryWaitingAThresholdBeginsTheStarvationAndItsCulpritsAreSampled() {
        var decision = Self.decision()
        let canary = StarvationDecision.Canary.waiting(sent: 1_000 * Self.ms)
        let begun = decision.pass(now: 1_100 * Self.ms, saturated: true, canary: canary)
        #expect(begun.action == .begin(canarySent: 1_000 * Self.ms) && begun.wakeAt == 1_110 * Self.ms)
        #expect(decision.isStarving && decision.isSaturated)
        let early = decision.pass(now: 1_105 * Self.ms, saturated: true, canary: canary)
        #expect(early.action == nil && early.wakeAt == 1_110 * Self.ms, "not before the sample interval")
        let sampled = decision.pass(now: 1_111 * Self.ms, saturated: true, canary: canary)
        #expect(sampled.action == .sampleCulprits && sampled.wakeAt == 1_121 * Self.ms)
        // Saturation is not required to go on: a pool whose jobs changed may still be starved until the canary runs.
        let unsaturated = decision.pass(now: 1_121 * Self.ms, saturated: false, canary: canary)
        #expect(unsaturated.action == .sampleCulprits)
    }

    @Test func theCanaryBeginningEndsItOnceTheJobsQueuedBehindItHadAMoment() {
        var decision = Self.decision()
        _ = decision.pass(now: 1_100 * Self.ms, saturated: true, canary: .waiting(sent: 1_000 * Self.ms))
        let ran = StarvationDecision.Canary.ran(sent: 1_000 * Self.ms, started: 1_300 * Self.ms)
        let draining = decision.pass(now: 1_301 * Self.ms, saturated: false, canary: ran)
        #expect(draining.action == nil && draining.wakeAt == 1_325 * Self.ms, "25 ms (or a quarter threshold)")
        #expect(decision.isStarving && !decision.isSaturated)
        // The begin seen once stands, whatever a later read says.
        let finished = decision.pass(now: 1_325 * Self.ms, saturated: true, canary: .waiting(sent: 1_320 * Self.ms))
        #expect(finished.action == .finish(canaryStarted: 1_300 * Self.ms) && finished.wakeAt == 1_400 * Self.ms)
        #expect(!decision.isStarving)
    }

    @Test func stoppingEndsAStarvationInProgressOnce() {
        var decision = Self.decision()
        let idle = decision.stop()
        #expect(!idle, "none in progress")
        _ = decision.pass(now: 1_100 * Self.ms, saturated: true, canary: .waiting(sent: 1_000 * Self.ms))
        let stopped = decision.stop()
        let again = decision.stop()
        #expect(stopped && !decision.isStarving && !again)
    }
}

/// Where a starvation report puts each culprit's job end.
struct StarvationCulpritTimesTests {
    @Test func aCulpritsJobEndsWhenSeenOverOrAtTheSaturationsEndAndNeverBeforeItBegan() {
        #expect(StarvationTracker.jobEnd(since: 100, endedAt: 150, saturationEnd: 200) == 150, "seen over")
        #expect(StarvationTracker.jobEnd(since: 100, endedAt: nil, saturationEnd: 200) == 200, "ran throughout")
        // A job that began after the pass read its clock (its worker read later): zero long, not 2^64 - 5.
        #expect(StarvationTracker.jobEnd(since: 205, endedAt: nil, saturationEnd: 200) == 205)
        #expect(StarvationTracker.jobEnd(since: 205, endedAt: 203, saturationEnd: 200) == 205)
    }
}
