@testable import Stallmon
@testable import StallmonReport
import StallmonTestSupport
import Testing

struct StallDetectorTests {
    let ms: UInt64 = 1_000_000
    var configuration: StallDetector.Configuration {
        .init(threshold: 100 * ms, sampleInterval: 10 * ms, maxSamples: 5, interimAfter: 1000 * ms)
    }

    /// Before issue 43: half the threshold; three quarters make a third fewer passes over an idle service.
    @Test func idleLoopProducesNoActionsAndPollsAtThreeQuartersOfTheThreshold() {
        var detector = StallDetector(configuration: configuration)
        let (actions, wake) = detector.step(.idle(completedIterations: 4), now: 1000 * ms)
        #expect(actions.isEmpty)
        #expect(wake == 1075 * ms)
    }

    @Test func busyBelowThresholdSleepsUntilTheExactCrossing() {
        var detector = StallDetector(configuration: configuration)
        let (actions, wake) = detector.step(.busy(iteration: 7, since: 990 * ms), now: 1000 * ms)
        #expect(actions.isEmpty)
        #expect(wake == 1075 * ms, "min(crossing 1090, next idle poll 1075)")
        let (later, wakeAgain) = detector.step(.busy(iteration: 7, since: 990 * ms), now: 1075 * ms)
        #expect(later.isEmpty)
        #expect(wakeAgain == 1090 * ms, "exactly when the iteration would cross the threshold")
    }

    @Test func crossingBeginsOnceThenSamplesAtTheIntervalUpToTheBudget() {
        var detector = StallDetector(configuration: configuration)
        var (actions, wake) = detector.step(.busy(iteration: 3, since: 0), now: 100 * ms)
        #expect(actions == [.begin(iteration: 3, since: 0)])
        #expect(wake == 110 * ms)
        var samples = 1
        var now = wake
        while now < 400 * ms {
            (actions, wake) = detector.step(.busy(iteration: 3, since: 0), now: now)
            #expect(!actions.contains(.begin(iteration: 3, since: 0)), "a stall begins once")
            samples += actions.filter { $0 == .sample }.count
            now = wake
        }
        #expect(samples == 5, "max_samples bounds the samples")
    }

    @Test func lateWakeUpsDoNotBurstSamples() {
        var detector = StallDetector(configuration: configuration)
        _ = detector.step(.busy(iteration: 1, since: 0), now: 100 * ms)
        let (actions, wake) = detector.step(.busy(iteration: 1, since: 0), now: 180 * ms)
        #expect(actions == [.sample])
        #expect(wake == 190 * ms)
    }

    @Test func theIterationEndingFinishesTheStallAndANewOneCanBeginAtOnce() {
        var detector = StallDetector(configuration: configuration)
        _ = detector.step(.busy(iteration: 1, since: 0), now: 120 * ms)
        let (actions, _) = detector.step(.busy(iteration: 2, since: 150 * ms), now: 260 * ms)
        #expect(actions == [.finish(iteration: 1, since: 0), .begin(iteration: 2, since: 150 * ms)])
        let (idle, _) = detector.step(.idle(completedIterations: 2), now: 300 * ms)
        #expect(idle == [.finish(iteration: 2, since: 150 * ms)])
        #expect(detector.tracking == nil)
    }

    @Test func interimReportIsDueOnceAfterTheLimit() {
        var detector = StallDetector(configuration: configuration)
        var interims = 0
        var now: UInt64 = 100 * ms
        while now < 3000 * ms {
            let (actions, wake) = detector.step(.busy(iteration: 9, since: 0), now: now)
            interims += actions.filter { $0 == .interim }.count
            if interims == 0 { #expect(now < 1000 * ms || actions.contains(.interim)) }
            now = wake
        }
        #expect(interims == 1)
    }

    @Test func iterationsJustUnderTheThresholdNeverBegin() {
        var detector = StallDetector(configuration: configuration)
        var now: UInt64 = 0
        for iteration in 1...50 as ClosedRange<UInt64> {
            let since = now
            var wake: UInt64
            var actions: [StallDetector.Action]
            (actions, wake) = detector.step(.busy(iteration: iteration, since: since), now: now)
            #expect(actions.isEmpty)
            if wake < since + 99 * ms {
                (actions, _) = detector.step(.busy(iteration: iteration, since: since), now: wake)
                #expect(actions.isEmpty)
            }
            now = since + 99 * ms
            (actions, wake) = detector.step(.idle(completedIterations: iteration), now: now)
            #expect(actions.isEmpty)
            _ = wake
            now += 1 * ms
        }
    }
}
