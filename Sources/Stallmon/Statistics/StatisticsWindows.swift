/// The two windows every statistics export keeps, per key (a loop, a pool class): swift-metrics every 10 s and an
/// event-log line every `lineInterval` (`loop_stats_interval_s`; 0: no lines), each over its own window. Pure
/// scheduling over an injected clock, shared by the loop's exporter (`LoopStatsReporter`) and the pool's
/// (`PoolStatsReporter`); what a window's figures are is theirs.
struct StatisticsWindows<Key: Hashable, Reading> {
    /// A reading and when it was taken (monotonic ns).
    typealias Mark = (at: UInt64, reading: Reading)

    /// A window that is over: its key's reading when it opened and now.
    struct Closed {
        var key: Key
        var start: Mark
        var end: Mark
    }

    /// What a step closed: the metrics windows (`metricsClosed` even when no key had a reading), the line windows.
    struct Step {
        var metricsClosed = false
        var metrics: [Closed] = []
        var lines: [Closed] = []
    }

    static var metricsInterval: UInt64 { 10_000_000_000 }

    private let lineInterval: UInt64
    /// The reading of a key that had none when its window opened.
    private let emptyReading: Reading
    private var metricsOpened: UInt64?
    private var lineOpened: UInt64?
    private var metricsStart: [Key: Mark] = [:]
    private var lineStart: [Key: Mark] = [:]

    init(lineInterval: Duration, emptyReading: Reading) {
        self.lineInterval = UInt64(max(0, lineInterval.nanosecondsClamped))
        self.emptyReading = emptyReading
    }

    /// When `step` is next due (monotonic ns), nil before the first step.
    var nextDue: UInt64? {
        guard let metricsOpened else { return nil }
        let metrics = metricsOpened &+ Self.metricsInterval
        guard lineInterval > 0, let lineOpened else { return metrics }
        return min(metrics, lineOpened &+ lineInterval)
    }

    /// Closes the windows that are over at `now` and opens the next ones at `readings`; the first call only opens.
    mutating func step(now: UInt64, readings: [Key: Reading]) -> Step {
        guard let metricsOpened, let lineOpened else {
            metricsOpened = now
            lineOpened = now
            for (key, reading) in readings {
                metricsStart[key] = (now, reading)
                lineStart[key] = (now, reading)
            }
            return Step()
        }
        var step = Step()
        if now >= metricsOpened &+ Self.metricsInterval {
            step.metricsClosed = true
            step.metrics = Self.close(&metricsStart, openedAt: metricsOpened, now: now, readings: readings,
                                      empty: emptyReading)
            self.metricsOpened = now
        }
        if lineInterval > 0, now >= lineOpened &+ lineInterval {
            step.lines = Self.close(&lineStart, openedAt: lineOpened, now: now, readings: readings, empty: emptyReading)
            self.lineOpened = now
        }
        return step
    }

    private static func close(_ starts: inout [Key: Mark], openedAt: UInt64, now: UInt64, readings: [Key: Reading],
                              empty: Reading) -> [Closed] {
        readings.map { key, reading in
            let start = starts[key] ?? (openedAt, empty)
            starts[key] = (now, reading)
            return Closed(key: key, start: start, end: (now, reading))
        }
    }
}
