@testable import Stallmon
import StallmonLoop
import Testing

/// When the watchdog exports the every-iteration figures, over which window: pure, on an injected clock.
struct LoopStatsReporterTests {
    let second: UInt64 = 1_000_000_000

    private func reading(iterations: UInt64, busyMs: Int64, elapsedS: Int64) -> LoopStatistics {
        LoopStatistics(iterations: iterations, busyTime: .milliseconds(busyMs), elapsed: .seconds(elapsedS))
    }

    @Test func theFirstStepOpensTheWindowsAndLinesComeEveryInterval() {
        var reporter = LoopStatsReporter(loopName: "main", lineInterval: .seconds(30))
        #expect(reporter.nextDue == nil)
        #expect(reporter.step(now: 100 * second, reading: reading(iterations: 10, busyMs: 0, elapsedS: 0)) == nil)
        #expect(reporter.nextDue == 110 * second, "metrics every 10 s come first")
        #expect(reporter.step(now: 110 * second, reading: reading(iterations: 50, busyMs: 2_000, elapsedS: 10)) == nil)
        #expect(reporter.nextDue == 120 * second)
        _ = reporter.step(now: 120 * second, reading: reading(iterations: 90, busyMs: 4_000, elapsedS: 20))
        let line = reporter.step(now: 130 * second, reading: reading(iterations: 130, busyMs: 15_000, elapsedS: 30))
        #expect(line?.loopName == "main")
        #expect(line?.window.iterations == 120)
        #expect(line?.window.elapsed == .seconds(30))
        #expect(line?.window.utilization == 0.5)
        #expect(reporter.nextDue == 140 * second)
    }

    @Test func anIntervalOfZeroWritesNoLine() {
        var reporter = LoopStatsReporter(loopName: "main", lineInterval: .zero)
        _ = reporter.step(now: 0, reading: reading(iterations: 0, busyMs: 0, elapsedS: 0))
        for tick in 1...100 {
            #expect(reporter.step(now: UInt64(tick) * 10 * second,
                                  reading: reading(iterations: UInt64(tick), busyMs: 1, elapsedS: Int64(tick))) == nil)
        }
        #expect(reporter.nextDue == 1010 * second, "metrics still every 10 s")
    }

    @Test func utilizationIsBusyOverWallAndClamped() {
        #expect(LoopStatistics().utilization == 0)
        #expect(reading(iterations: 1, busyMs: 250, elapsedS: 1).utilization == 0.25)
        #expect(reading(iterations: 1, busyMs: 5_000, elapsedS: 1).utilization == 1)
        let later = reading(iterations: 30, busyMs: 900, elapsedS: 3)
        let window = later.since(reading(iterations: 10, busyMs: 400, elapsedS: 1))
        #expect(window.iterations == 20 && window.busyTime == .milliseconds(500) && window.elapsed == .seconds(2))
    }
}
