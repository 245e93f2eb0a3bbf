import CStallmonConcurrency
import Metrics
import StallmonLoop

/// The every-job figures of Swift Concurrency's pool, exported as `LoopStatsReporter` exports a loop's: swift-metrics
/// every 10 s and a `pool.stats` event-log line every `loop_stats_interval_s`, each over its own window
/// (`StatisticsWindows`), per pool class (the global executor's priority bands and the main actor). Named so a
/// tokio-metrics user finds their way: job run time is tokio's poll duration, queue delay its scheduled duration, a slow job its slow poll, a long
/// delay its long delay, and the busy ratio its `busy_ratio`. Pure over injected readings; the watchdog calls `step`.
struct PoolStatsReporter {
    /// A pool class: where its jobs run and at which priority band.
    struct PoolClass: Hashable, Sendable {
        var pool: String
        /// `high`, `medium`, `low`, `background`, or `main` for the main actor.
        var priority: String
        /// Threads that can run its jobs at once: the machine's CPUs for the global executor, 1 for the main actor.
        var capacity: Int
    }

    /// Cumulative figures of one class as read at one instant (see `cstallmon_pool_stats`).
    struct Reading: Sendable, Equatable {
        var totals = cstallmon_pool_totals()
        var run = LoopBusyHistogram(counts: [])
        var delay = LoopBusyHistogram(counts: [])
        /// Of the jobs running now, how long each has run so far, added up (ns): busy time not in `totals` yet.
        var inProgressNanoseconds: UInt64 = 0

        /// The workers' statistics of `poolClass` (a `cstallmon_pool_class`) now; nothing in progress counted.
        static func current(poolClass: Int32) -> Reading {
            var reading = Reading()
            var run = [UInt64](repeating: 0, count: LoopBusyHistogram.bucketCount)
            var delay = [UInt64](repeating: 0, count: LoopBusyHistogram.bucketCount)
            _ = run.withUnsafeMutableBufferPointer { runBuffer in
                delay.withUnsafeMutableBufferPointer { delayBuffer in
                    cstallmon_pool_stats(poolClass, &reading.totals, runBuffer.baseAddress, delayBuffer.baseAddress,
                                         runBuffer.count)
                }
            }
            reading.run = LoopBusyHistogram(counts: run)
            reading.delay = LoopBusyHistogram(counts: delay)
            return reading
        }

        static func == (lhs: Reading, rhs: Reading) -> Bool {
            lhs.run == rhs.run && lhs.delay == rhs.delay && lhs.inProgressNanoseconds == rhs.inProgressNanoseconds
                && lhs.totals.jobs == rhs.totals.jobs && lhs.totals.run_ns == rhs.totals.run_ns
                && lhs.totals.delay_ns == rhs.totals.delay_ns && lhs.totals.slow_jobs == rhs.totals.slow_jobs
                && lhs.totals.long_delays == rhs.totals.long_delays
        }
    }

    /// One class's figures over a window.
    struct Window: Sendable, Equatable {
        var poolClass: PoolClass
        var elapsedNanoseconds: UInt64
        var jobs: UInt64
        var run: LoopBusyHistogram
        var delay: LoopBusyHistogram
        var runNanoseconds: UInt64
        var delayNanoseconds: UInt64
        var slowJobs: UInt64
        var longDelays: UInt64
        /// Time the class's jobs held threads in the window, the parts of jobs still running included.
        var busyNanoseconds: UInt64
        /// Workers alive at the window's end (threads of the whole pool, all classes; nil for the main actor).
        var workers: Int?
        /// The workers the pool may run at once (`PoolWidth`; nil for the main actor).
        var poolWidth: Int? = nil
        /// The CPU limit's throttling over the window, when the process has a limit.
        var throttling: CPUContention.WindowThrottling? = nil

        /// Busy time ÷ (window × capacity), 0…1.
        var busyRatio: Double {
            guard elapsedNanoseconds > 0, poolClass.capacity > 0 else { return 0 }
            return min(1, Double(busyNanoseconds) / (Double(elapsedNanoseconds) * Double(poolClass.capacity)))
        }

        init(_ poolClass: PoolClass, from start: (at: UInt64, reading: Reading), to end: (at: UInt64, reading: Reading),
             workers: Int?) {
            self.poolClass = poolClass
            elapsedNanoseconds = end.at &- start.at
            let now = end.reading.totals
            let then = start.reading.totals
            jobs = now.jobs &- then.jobs
            run = end.reading.run.subtracting(start.reading.run)
            delay = end.reading.delay.subtracting(start.reading.delay)
            runNanoseconds = now.run_ns &- then.run_ns
            delayNanoseconds = now.delay_ns &- then.delay_ns
            slowJobs = now.slow_jobs &- then.slow_jobs
            longDelays = now.long_delays &- then.long_delays
            // Jobs that ended in the window counted whole, minus what of them ran before it; jobs still running
            // counted as far as they got.
            let busy = Int128(runNanoseconds) + Int128(end.reading.inProgressNanoseconds)
                - Int128(start.reading.inProgressNanoseconds)
            busyNanoseconds = UInt64(clamping: max(0, busy))
            self.workers = workers
        }
    }

    /// The `le` bounds of the exported histograms, in seconds (Prometheus's cumulative buckets).
    static let bucketBounds: [Double] = [0.0001, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

    private let factory: any MetricsFactory
    private var windows: StatisticsWindows<PoolClass, Reading>
    private var metrics: [PoolClass: ClassMetrics] = [:]
    private var workerGauges: [String: Gauge] = [:]

    init(lineInterval: Duration, factory: any MetricsFactory = MetricsSystem.factory) {
        windows = StatisticsWindows(lineInterval: lineInterval, emptyReading: Reading())
        self.factory = factory
    }

    /// When `step` is next due (monotonic ns), nil before the first step.
    var nextDue: UInt64? { windows.nextDue }

    /// Updates the metrics and returns the windows of the `pool.stats` lines when their windows are over (only
    /// classes that ran or held a job in it); the first call only opens the windows. `workers`: alive per pool
    /// (the main actor has none of its own).
    mutating func step(now: UInt64, readings: [PoolClass: Reading], workers: [String: Int]) -> [Window] {
        let step = windows.step(now: now, readings: readings)
        for closed in step.metrics {
            let window = Window(closed.key, from: closed.start, to: closed.end, workers: workers[closed.key.pool])
            if window.jobs > 0 || window.busyNanoseconds > 0 || metrics[closed.key] != nil { record(window) }
        }
        if step.metricsClosed {
            for (pool, count) in workers {
                let gauge = workerGauges[pool] ?? Gauge(label: "stallmon_pool_workers", dimensions: [("pool", pool)],
                                                        factory: factory)
                workerGauges[pool] = gauge
                gauge.record(count)
            }
        }
        return step.lines
            .map { Window($0.key, from: $0.start, to: $0.end, workers: workers[$0.key.pool]) }
            .filter { $0.jobs > 0 || $0.busyNanoseconds > 0 }
            .sorted { ($0.poolClass.pool, $0.poolClass.priority) < ($1.poolClass.pool, $1.poolClass.priority) }
    }

    private mutating func record(_ window: Window) {
        let classMetrics = metrics[window.poolClass] ?? ClassMetrics(window.poolClass, factory: factory)
        metrics[window.poolClass] = classMetrics
        classMetrics.record(window)
    }

    /// One class's swift-metrics, made when it first has something to say.
    private final class ClassMetrics {
        let jobs: Counter
        let slowJobs: Counter
        let longDelays: Counter
        let busyRatio: Gauge
        let runBuckets: [Counter]
        let runSum: FloatingPointCounter
        let delayBuckets: [Counter]
        let delaySum: FloatingPointCounter

        init(_ poolClass: PoolClass, factory: any MetricsFactory) {
            let dimensions = [("pool", poolClass.pool), ("priority", poolClass.priority)]
            func buckets(_ label: String) -> [Counter] {
                (PoolStatsReporter.bucketBounds.map { bound in "\(bound)" } + ["+Inf"]).map { le in
                    Counter(label: label, dimensions: dimensions + [("le", le)], factory: factory)
                }
            }
            jobs = Counter(label: "stallmon_pool_jobs_total", dimensions: dimensions, factory: factory)
            slowJobs = Counter(label: "stallmon_pool_slow_jobs_total", dimensions: dimensions, factory: factory)
            longDelays = Counter(label: "stallmon_pool_long_delays_total", dimensions: dimensions, factory: factory)
            busyRatio = Gauge(label: "stallmon_pool_busy_ratio", dimensions: dimensions, factory: factory)
            runBuckets = buckets("stallmon_pool_job_run_seconds_bucket")
            runSum = FloatingPointCounter(label: "stallmon_pool_job_run_seconds_sum", dimensions: dimensions,
                                          factory: factory)
            delayBuckets = buckets("stallmon_pool_queue_delay_seconds_bucket")
            delaySum = FloatingPointCounter(label: "stallmon_pool_queue_delay_seconds_sum", dimensions: dimensions,
                                            factory: factory)
        }

        func record(_ window: Window) {
            jobs.increment(by: Int64(clamping: window.jobs))
            slowJobs.increment(by: Int64(clamping: window.slowJobs))
            longDelays.increment(by: Int64(clamping: window.longDelays))
            busyRatio.record(window.busyRatio)
            Self.add(window.run, to: runBuckets)
            runSum.increment(by: Double(window.runNanoseconds) / 1e9)
            Self.add(window.delay, to: delayBuckets)
            delaySum.increment(by: Double(window.delayNanoseconds) / 1e9)
        }

        /// Cumulative: each bound counts the jobs whose log-linear bucket's midpoint is at or below it (within
        /// 3.2 % of the job's value), the last (`+Inf`) all of them.
        static func add(_ histogram: LoopBusyHistogram, to counters: [Counter]) {
            var cumulative: UInt64 = 0
            var bound = 0
            for (index, count) in histogram.counts.enumerated() where count > 0 {
                let seconds = Double(LoopBusyHistogram.midpoint(ofBucket: index)) / 1e9
                while bound < PoolStatsReporter.bucketBounds.count && seconds > PoolStatsReporter.bucketBounds[bound] {
                    counters[bound].increment(by: Int64(clamping: cumulative))
                    bound += 1
                }
                cumulative &+= count
            }
            while bound < counters.count {
                counters[bound].increment(by: Int64(clamping: cumulative))
                bound += 1
            }
        }
    }
}
