import CStallmonLoopShims

/// The watchdog thread of one monitor, whatever it watches: each pass checks for a whole-process freeze, lets its
/// `ProbeSource` read and step every watched thread, answers a snapshot request, exports statistics when due, and
/// sleeps until the earliest wake-up anyone asked for (on an eventfd with a nanosecond timeout, so `stop()` is
/// immediate).
final class Watchdog: Sendable {
    /// Used on the watchdog thread only, from `start()` on.
    nonisolated(unsafe) private let source: any ProbeSource
    private let client: ReportClient
    private let writer: ReportWriter
    /// The name freezes are reported under (the loop's or the pool's).
    private let name: String
    let runner = StoppableThread()

    init(source: any ProbeSource, name: String, client: ReportClient, writer: ReportWriter) {
        self.source = source
        self.name = name
        self.client = client
        self.writer = writer
    }

    /// Why its wake-up signal could not be created (the monitor then refuses to start).
    var setupError: FileError? { runner.creationError }

    /// Starts the thread; false when it could not be created.
    func start() -> Bool {
        runner.start(name: source.threadName) { [self] in run() }
    }

    /// Stops and joins it; a stall in progress is written as ongoing.
    func stop() {
        runner.stop()
    }

    private func run() {
        var freezeWatch = FreezeWatch(thresholdNanoseconds: UInt64(client.configuration.threshold.nanosecondsClamped))
        let snapshots = SnapshotCoordinator.shared
        var answeredSnapshot: UInt64 = 0
        snapshots.join(ObjectIdentifier(self), runner: runner)
        defer { snapshots.leave(ObjectIdentifier(self)) }

        while !runner.isStopping {
            let now = cstallmon_monotonic_ns()
            if let frozen = freezeWatch.passBegins(now: now) { reportFreeze(frozen) }
            var pass = source.pass(now: now, freezes: freezeWatch.freezes)
            // A snapshot on demand after the pass, so that its captures never delay the pass's reading of `now`.
            if let request = snapshots.pending(after: answeredSnapshot) {
                answeredSnapshot = request
                let (parts, waited) = source.snapshotParts()
                pass.waitedOnItsOwnWork = pass.waitedOnItsOwnWork || waited
                snapshots.contribute(ObjectIdentifier(self), generation: request, parts: parts)
            }
            if pass.watchedNothing {
                freezeWatch.skipNextWake()
                runner.wait(until: pass.wakeAt)
                continue
            }
            if let due = source.statisticsDue, now >= due { source.exportStatistics(now: now) }
            if let due = source.statisticsDue { pass.wakeAt = min(pass.wakeAt, due) }
            if let frozen = freezeWatch.passEnds(began: now, waitedOnItsOwnWork: pass.waitedOnItsOwnWork,
                                                 wakeAt: pass.wakeAt) {
                reportFreeze(frozen)
            }
            runner.wait(until: pass.wakeAt)
        }
        source.stop(freezes: freezeWatch.freezes)
    }

    private func reportFreeze(_ nanoseconds: UInt64) {
        client.counters.freezes.wrappingAdd(1, ordering: .relaxed)
        writer.submit(.frozen(loopName: name, nanoseconds: nanoseconds), from: client)
    }
}
