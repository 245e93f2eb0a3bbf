import StallmonLoop
import StallmonReport

/// What each message of the writer says in the event log: one `StallEvent` per line, made here and appended by the
/// writer.
enum EventLines {
    /// The line of a stall's `step` (`begin`, `interim`, `hang`, `end`), in the stall's family: `stall.begin`, or a
    /// section's (`starvation.begin`).
    static func stall(_ step: String, _ snapshot: StallEvidence) -> StallEvent {
        var event = StallEvent(time: WallClock.iso8601(nanoseconds: WallClock.nowNanoseconds()),
                               event: "\(snapshot.eventFamily).\(step)")
        event.id = snapshot.id
        event.loop = snapshot.loopName
        event.tid = snapshot.threadID
        event.thresholdMs = Double(snapshot.thresholdNanoseconds) / 1e6
        event.label = snapshot.taskLabel?.text ?? (snapshot.labelID == 0 ? nil : LooperLabel(id: snapshot.labelID).name)
        event.traceId = snapshot.taskLabel?.traceId
        event.spanId = snapshot.taskLabel?.spanId
        event.mode = snapshot.mode
        event.job = snapshot.job
        return event
    }

    /// The event line of a report written while its stall goes on (`interim`, `hang`).
    static func ongoing(_ step: String, _ snapshot: StallEvidence, _ report: StallReport,
                        path: String?) -> StallEvent {
        var event = stall(step, snapshot)
        event.durationMs = report.durationMs
        event.topFrame = report.topFrame?.displayName
        event.samples = report.samples.count
        event.report = path
        event.phase = report.phase
        return event
    }

    /// The whole process did not run: a `process.frozen` line.
    static func frozen(_ loopName: String, _ nanoseconds: UInt64) -> StallEvent {
        var event = StallEvent(time: WallClock.iso8601(nanoseconds: WallClock.nowNanoseconds()),
                               event: "process.frozen")
        event.loop = loopName
        event.durationMs = Double(nanoseconds) / 1e6
        event.message = "the process did not run (SIGSTOP, debugger or VM pause); not counted as a stall"
        return event
    }

    /// A loop's window of iterations: a `loop.stats` line.
    static func loopStats(_ line: LoopStatsReporter.Line, threadID: Int32) -> StallEvent {
        var event = StallEvent(time: WallClock.iso8601(nanoseconds: WallClock.nowNanoseconds()), event: "loop.stats")
        event.loop = line.loopName
        event.tid = threadID
        let window = line.window
        event.windowS = Double(window.elapsed.nanosecondsClamped) / 1e9
        event.iterations = Int(clamping: window.iterations)
        event.busyP50Ms = Self.milliseconds(window.busyHistogram, 0.5)
        event.busyP90Ms = Self.milliseconds(window.busyHistogram, 0.9)
        event.busyP99Ms = Self.milliseconds(window.busyHistogram, 0.99)
        event.busyMaxMs = Self.milliseconds(window.busyHistogram, 1)
        event.utilization = (window.utilization * 10_000).rounded() / 10_000
        throttling(&event, line.throttling)
        return event
    }

    /// The CPU limit and its throttling over a statistics line's window.
    static func throttling(_ event: inout StallEvent, _ throttling: CPUContention.WindowThrottling?) {
        guard let throttling else { return }
        event.cpuLimit = throttling.limitCPUs
        event.periods = Int(clamping: throttling.periods)
        event.throttledPeriods = Int(clamping: throttling.throttledPeriods)
        event.throttledMs = Double(throttling.throttledNanoseconds) / 1e6
    }

    /// A pool class's window of jobs: a `pool.stats` line.
    static func poolStats(_ window: PoolStatsReporter.Window) -> StallEvent {
        var event = StallEvent(time: WallClock.iso8601(nanoseconds: WallClock.nowNanoseconds()), event: "pool.stats")
        event.loop = window.poolClass.pool
        event.priority = window.poolClass.priority
        event.windowS = Double(window.elapsedNanoseconds) / 1e9
        event.jobs = Int(clamping: window.jobs)
        event.runP50Ms = Self.milliseconds(window.run, 0.5)
        event.runP90Ms = Self.milliseconds(window.run, 0.9)
        event.runP99Ms = Self.milliseconds(window.run, 0.99)
        event.runMaxMs = Self.milliseconds(window.run, 1)
        event.delayP50Ms = Self.milliseconds(window.delay, 0.5)
        event.delayP90Ms = Self.milliseconds(window.delay, 0.9)
        event.delayP99Ms = Self.milliseconds(window.delay, 0.99)
        event.delayMaxMs = Self.milliseconds(window.delay, 1)
        event.slowJobs = Int(clamping: window.slowJobs)
        event.longDelays = Int(clamping: window.longDelays)
        event.workers = window.workers
        event.poolWidth = window.poolWidth
        throttling(&event, window.throttling)
        event.utilization = (window.busyRatio * 10_000).rounded() / 10_000
        return event
    }

    /// A histogram's percentile in milliseconds, for the statistics lines.
    private static func milliseconds(_ histogram: LoopBusyHistogram, _ fraction: Double) -> Double? {
        histogram.percentile(fraction).map { Double($0.nanosecondsClamped) / 1e6 }
    }
}
