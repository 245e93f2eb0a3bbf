import CStallmonConcurrency
import Metrics
import MetricsTestKit
import StallmonLoop
import Testing

@testable import Stallmon

/// `PoolStatsReporter` over made-up readings: the swift-metrics it records (names, dimensions, cumulative
/// buckets) and the windows of its `pool.stats` lines.
@Suite("Swift Concurrency pool statistics")
struct PoolStatsReporterTests {
    static let medium = PoolStatsReporter.PoolClass(pool: "swift-global-executor", priority: "medium", capacity: 2)
    static let main = PoolStatsReporter.PoolClass(pool: "main-actor", priority: "main", capacity: 1)
    static let second: UInt64 = 1_000_000_000

    /// A reading with `runs` and `delays` (ns → how many jobs) and the matching totals.
    static func reading(runs: [UInt64: UInt64], delays: [UInt64: UInt64], slow: UInt64 = 0, long: UInt64 = 0,
                        inProgress: UInt64 = 0) -> PoolStatsReporter.Reading {
        func histogram(_ values: [UInt64: UInt64]) -> LoopBusyHistogram {
            var counts = [UInt64](repeating: 0, count: LoopBusyHistogram.bucketCount)
            for (value, count) in values { counts[LoopBusyHistogram.bucket(of: value)] += count }
            return LoopBusyHistogram(counts: counts)
        }
        var reading = PoolStatsReporter.Reading()
        reading.run = histogram(runs)
        reading.delay = histogram(delays)
        reading.totals.jobs = runs.values.reduce(0, +)
        reading.totals.run_ns = runs.reduce(0) { $0 + $1.key * $1.value }
        reading.totals.delay_ns = delays.reduce(0) { $0 + $1.key * $1.value }
        reading.totals.slow_jobs = slow
        reading.totals.long_delays = long
        reading.inProgressNanoseconds = inProgress
        return reading
    }

    @Test("metrics every 10 s: job counts, cumulative run-time and queue-delay buckets, slow jobs, long delays, busy ratio, workers")
    func metrics() throws {
        let metrics = TestMetrics()
        var reporter = PoolStatsReporter(lineInterval: .seconds(60), factory: metrics)
        #expect(reporter.step(now: 0, readings: [Self.medium: Self.reading(runs: [:], delays: [:])],
                              workers: ["swift-global-executor": 2]).isEmpty)
        #expect(reporter.nextDue == 10 * Self.second)
        // 90 jobs of 50 µs and 10 of 200 ms; 95 waited 10 µs, 5 waited 300 ms.
        let later = Self.reading(runs: [50_000: 90, 200_000_000: 10], delays: [10_000: 95, 300_000_000: 5],
                                 slow: 10, long: 5)
        #expect(reporter.step(now: 10 * Self.second, readings: [Self.medium: later],
                              workers: ["swift-global-executor": 3]).isEmpty, "no line before 60 s")
        let dimensions = [("pool", "swift-global-executor"), ("priority", "medium")]
        #expect(try metrics.expectCounter("stallmon_pool_jobs_total", dimensions).totalValue == 100)
        #expect(try metrics.expectCounter("stallmon_pool_slow_jobs_total", dimensions).totalValue == 10)
        #expect(try metrics.expectCounter("stallmon_pool_long_delays_total", dimensions).totalValue == 5)
        func bucket(_ label: String, _ le: String) throws -> Int64 {
            try metrics.expectCounter(label, dimensions + [("le", le)]).totalValue
        }
        let run = "stallmon_pool_job_run_seconds_bucket"
        #expect(try bucket(run, "0.0001") == 90)
        #expect(try bucket(run, "0.1") == 90)
        #expect(try bucket(run, "0.25") == 100)
        #expect(try bucket(run, "+Inf") == 100)
        let delay = "stallmon_pool_queue_delay_seconds_bucket"
        #expect(try bucket(delay, "0.0001") == 95)
        #expect(try bucket(delay, "0.25") == 95)
        #expect(try bucket(delay, "0.5") == 100)
        // 2,000.0045 s of run time in all: the sum counter holds its whole seconds (TestMetrics has no floating
        // point counter; swift-metrics accumulates the fraction).
        #expect(try metrics.expectCounter("stallmon_pool_job_run_seconds_sum", dimensions).totalValue == 2)
        // Busy 2.0045 s of 10 s on 2 threads.
        let ratio = try metrics.expectGauge("stallmon_pool_busy_ratio", dimensions).lastValue ?? -1
        #expect(abs(ratio - 2.0045 / 20) < 1e-9, "\(ratio)")
        #expect(try metrics.expectGauge("stallmon_pool_workers", [("pool", "swift-global-executor")]).lastValue == 3)
    }

    @Test("pool.stats windows: only classes that did something; busy time counts the running part of a job")
    func lines() throws {
        var reporter = PoolStatsReporter(lineInterval: .seconds(1), factory: TestMetrics())
        let idle = Self.reading(runs: [:], delays: [:])
        // The main actor's job began 0.5 s before the window and still runs at its start.
        _ = reporter.step(now: 0, readings: [Self.medium: idle, Self.main: Self.reading(runs: [:], delays: [:],
                                                                                       inProgress: Self.second / 2)],
                          workers: [:])
        // It ended 0.8 s in (1.3 s long); nothing else ran.
        let windows = reporter.step(now: Self.second, readings: [
            Self.medium: idle,
            Self.main: Self.reading(runs: [1_300_000_000: 1], delays: [2_000: 1], slow: 1),
        ], workers: ["swift-global-executor": 2])
        #expect(windows.count == 1, "the idle class has no line: \(windows.map(\.poolClass))")
        let window = try #require(windows.first)
        #expect(window.poolClass == Self.main)
        #expect(window.jobs == 1 && window.slowJobs == 1)
        #expect(window.busyNanoseconds == 800_000_000, "1.3 s minus the 0.5 s before the window")
        #expect(abs(window.busyRatio - 0.8) < 1e-9)
        #expect(window.workers == nil, "the main actor has no workers of its own")
        #expect(reporter.nextDue == 2 * Self.second)
    }
}
