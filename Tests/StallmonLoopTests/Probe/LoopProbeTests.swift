@testable import StallmonLoop
import Testing

struct LoopProbeTests {
    let ms: UInt64 = 1_000_000

    @Test func wakeOpensAnIntervalThatTheNextPassContinues() {
        let probe = LoopProbe(thresholdNanoseconds: 100 * ms)
        #expect(probe.read() == .idle(completedIterations: 0))
        probe.loopWoke(at: 10 * ms)
        #expect(probe.read() == .busy(iteration: 1, since: 10 * ms))
        probe.passBegins(at: 12 * ms)  // same interval: the wake-up opened it
        #expect(probe.read() == .busy(iteration: 1, since: 10 * ms))
        probe.loopIdles(at: 20 * ms)
        #expect(probe.read() == .idle(completedIterations: 1))
    }

    @Test func passesWithoutSleepAreSeparateIterations() {
        let probe = LoopProbe(thresholdNanoseconds: 100 * ms)
        probe.passBegins(at: 0)
        probe.passBegins(at: 5 * ms)
        probe.passBegins(at: 9 * ms)
        #expect(probe.read() == .busy(iteration: 3, since: 9 * ms))
    }

    @Test func longIterationsArePublishedWithTheirExactBounds() {
        let probe = LoopProbe(thresholdNanoseconds: 100 * ms)
        probe.passBegins(at: 0)
        probe.loopIdles(at: 99 * ms)
        #expect(probe.longIterationRecord(1) == nil, "99 ms is not long")
        probe.loopWoke(at: 200 * ms)
        probe.loopIdles(at: 350 * ms)
        let record = probe.longIterationRecord(2)
        #expect(record?.begin == 200 * ms)
        #expect(record?.end == 350 * ms)
        #expect(probe.longIterationCount.load(ordering: .relaxed) == 1)
    }
}
