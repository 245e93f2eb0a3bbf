import CStallmonConcurrency
import CStallmonLoopShims
import Logging
import Metrics
import StallmonLoop
import StallmonReport
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The watchdog thread of the global executor: every pass reads each worker's probe (`CStallmonConcurrency`), and
/// a `StallTracker` per worker decides, samples and reports, exactly as for a loop thread. A worker's capture slot
/// is borrowed when its stall begins and returned when it ends, and the worker is pinned while it is signalled, so
/// its thread cannot finish exiting (and its id cannot be reused) meanwhile.
final class GlobalExecutorWatchdog: WatchdogThread {
    private let poolName: String
    /// The `loop` of a main-actor job's report: the main actor is no pool, though a pool's worker runs it.
    private let mainActorName: String
    private let client: ReportClient
    private let writer: ReportWriter
    let runner = StoppableThread()
    let threadName = "stallmon-pool"
    private let stallCounter: Counter
    private let stallDuration: Metrics.Timer
    private let poolClasses: [PoolStatsReporter.PoolClass]
    /// The pool's statistics when the monitor was created: its figures count jobs from then on.
    private let statisticsBaseline: (at: UInt64, readings: [PoolStatsReporter.PoolClass: PoolStatsReporter.Reading])

    init(poolName: String, mainActorName: String, client: ReportClient, writer: ReportWriter) {
        self.poolName = poolName
        self.mainActorName = mainActorName
        self.client = client
        self.writer = writer
        stallCounter = Counter(label: "stallmon_stalls_total", dimensions: [("loop", poolName)])
        stallDuration = Metrics.Timer(label: "stallmon_stall_duration", dimensions: [("loop", poolName)])
        let classes = Self.poolClasses(poolName: poolName, mainActorName: mainActorName)
        poolClasses = classes
        statisticsBaseline = (cstallmon_monotonic_ns(), Self.poolReadings(classes, inProgress: nil))
    }

    // MARK: - Watchdog thread

    /// One worker as this thread knows it: a thread in a probe (a new thread in the same probe is a new worker).
    private final class Worker {
        let index: Int32
        let generation: UInt32
        let tid: Int32
        let tracker: StallTracker
        var capturer: StackCapturer?
        /// The probe as it was read while the latest job ran: the attributes of the stall that job may become.
        var jobReading: cstallmon_worker_reading?

        init(index: Int32, generation: UInt32, tid: Int32, tracker: StallTracker) {
            self.index = index
            self.generation = generation
            self.tid = tid
            self.tracker = tracker
        }
    }

    func run() {
        let configuration = client.configuration
        let detectorConfiguration = StallTracker.detectorConfiguration(configuration)
        var freezeWatch = FreezeWatch(thresholdNanoseconds: detectorConfiguration.threshold)
        var workers: [Int32: Worker] = [:]
        let lender = SlotLender(maxFrames: configuration.maxFrames, timeout: configuration.captureTimeout,
                                maxOwedSlots: 8)
        var poolStats = PoolStatsReporter(lineInterval: configuration.loopStatsInterval)
        _ = poolStats.step(now: statisticsBaseline.at, readings: statisticsBaseline.readings, workers: [:])
        let poolClasses = poolClasses
        let starvation = StarvationWatch(poolName: poolName, client: client, writer: writer, lender: lender)
        let snapshots = SnapshotCoordinator.shared
        var answeredSnapshot: UInt64 = 0
        snapshots.join(ObjectIdentifier(self), runner: runner)
        defer { snapshots.leave(ObjectIdentifier(self)) }

        while !runner.isStopping {
            let now = cstallmon_monotonic_ns()
            if let frozen = freezeWatch.passBegins(now: now) {
                client.counters.freezes.wrappingAdd(1, ordering: .relaxed)
                writer.submit(.frozen(loopName: poolName, nanoseconds: frozen), from: client)
            }
            var wakeAt = now + detectorConfiguration.idlePoll
            // Whether this pass waits on work of its own (captures, the writer): then its length is not a freeze.
            var waitedOnItsOwnWork = false
            var inProgress = [UInt64](repeating: 0, count: poolClasses.count)
            var workersAlive = 0
            var views: [StarvationWatch.WorkerView] = []
            for index in Int32(0)..<Int32(CSTALLMON_MAX_WORKERS) {
                var probe = cstallmon_worker_reading()
                let present = cstallmon_worker_read(index, &probe) == 1
                var worker = workers[index]
                if let known = worker, !present || known.generation != probe.generation {
                    // The thread exited (its last job ended before it did): a stall in progress ends now.
                    let (_, waited) = step(known, .idle(completedIterations: 0), now: now,
                                           freezes: freezeWatch.freezes, lender: lender, retired: true)
                    waitedOnItsOwnWork = waitedOnItsOwnWork || waited
                    lender.giveBack(&known.capturer)
                    workers[index] = nil
                    worker = nil
                }
                guard present else { continue }
                if probe.state == 1 { workersAlive += 1 }
                views.append(.init(index: index, generation: probe.generation, tid: probe.tid, probe: probe))
                if probe.sequence & 1 == 1 {
                    let poolClass = Int(cstallmon_pool_class_of(probe.priority, probe.main_actor))
                    if poolClass < inProgress.count { inProgress[poolClass] += now &- min(now, probe.job_since) }
                }
                if worker == nil {
                    let tracker = StallTracker(loopName: poolName, client: client, writer: writer, annotations: nil,
                                               stallCounter: stallCounter, stallDuration: stallDuration)
                    let created = Worker(index: index, generation: probe.generation, tid: probe.tid, tracker: tracker)
                    workers[index] = created
                    worker = created
                }
                guard let worker else { continue }
                let reading = Self.reading(probe)
                // The job's attributes, for the stall it may become: refreshed for every job but the one already
                // stalled (a next job that crosses the threshold in the pass that ends the previous stall is its own).
                if case .busy(let iteration, _) = reading, !worker.tracker.isTracking(iteration: iteration) {
                    worker.jobReading = probe
                }
                let (workerWake, waited) = step(worker, reading, now: now, freezes: freezeWatch.freezes,
                                                lender: lender)
                waitedOnItsOwnWork = waitedOnItsOwnWork || waited
                wakeAt = min(wakeAt, workerWake)
                if !worker.tracker.isStalled { lender.giveBack(&worker.capturer) }
            }
            if let request = snapshots.pending(after: answeredSnapshot) {
                answeredSnapshot = request
                let parts = snapshotParts(views, workersAlive: workersAlive, lender: lender)
                // Each busy worker's capture waits up to capture_timeout_ms.
                waitedOnItsOwnWork = waitedOnItsOwnWork || parts.contains { $0.sample != nil }
                snapshots.contribute(ObjectIdentifier(self), generation: request, parts: parts)
            }
            let starving = starvation.isStarving
            wakeAt = min(wakeAt, starvation.pass(now: now, workers: views) { view in
                (Self.job(of: view.probe, index: view.index), Self.label(index: view.index, sequence: view.probe.sequence))
            })
            waitedOnItsOwnWork = waitedOnItsOwnWork || starving || starvation.isStarving
            if configuration.poolStatistics, poolStats.nextDue.map({ now >= $0 }) ?? true {
                let windows = poolStats.step(now: now, readings: Self.poolReadings(poolClasses, inProgress: inProgress),
                                             workers: [poolName: workersAlive])
                for window in windows { writer.submit(.poolStats(window), from: client) }
            }
            if configuration.poolStatistics, let due = poolStats.nextDue { wakeAt = min(wakeAt, due) }
            if let frozen = freezeWatch.passEnds(began: now, waitedOnItsOwnWork: waitedOnItsOwnWork, wakeAt: wakeAt) {
                client.counters.freezes.wrappingAdd(1, ordering: .relaxed)
                writer.submit(.frozen(loopName: poolName, nanoseconds: frozen), from: client)
            }
            runner.wait(until: wakeAt)
        }
        // Stopping: a stall whose job ends within a short grace (stop() often comes right after the work that
        // stalled, while its worker is still finishing the job) is finished as usual; one still going on after it
        // is left as an ongoing report.
        let grace = cstallmon_monotonic_ns() + min(UInt64(50_000_000), detectorConfiguration.threshold)
        var stalled = workers.values.filter(\.tracker.isStalled)
        while !stalled.isEmpty {
            let now = cstallmon_monotonic_ns()
            for worker in stalled {
                var probe = cstallmon_worker_reading()
                guard cstallmon_worker_read(worker.index, &probe) == 1, probe.generation == worker.generation,
                      probe.sequence & 1 == 0 || !worker.tracker.isTracking(iteration: (probe.sequence + 1) / 2)
                else { continue }
                _ = step(worker, Self.reading(probe), now: now, freezes: freezeWatch.freezes, lender: lender)
            }
            stalled.removeAll { !$0.tracker.isStalled }
            if now >= grace { break }
            usleep(1000)
        }
        starvation.stopMidStarvation(now: cstallmon_monotonic_ns())
        for worker in workers.values {
            worker.tracker.stopMidStall(now: cstallmon_monotonic_ns(), tid: worker.tid, freezes: freezeWatch.freezes)
            lender.giveBack(&worker.capturer)
        }
    }

    /// The pool classes in `cstallmon_pool_class` order.
    private static func poolClasses(poolName: String, mainActorName: String) -> [PoolStatsReporter.PoolClass] {
        let cpus = max(1, sysconf(Int32(_SC_NPROCESSORS_ONLN)))
        var classes = [PoolStatsReporter.PoolClass](
            repeating: .init(pool: poolName, priority: "", capacity: cpus), count: Int(CSTALLMON_POOL_CLASSES.rawValue))
        classes[Int(CSTALLMON_POOL_HIGH.rawValue)].priority = "high"
        classes[Int(CSTALLMON_POOL_MEDIUM.rawValue)].priority = "medium"
        classes[Int(CSTALLMON_POOL_LOW.rawValue)].priority = "low"
        classes[Int(CSTALLMON_POOL_BACKGROUND.rawValue)].priority = "background"
        classes[Int(CSTALLMON_POOL_MAIN.rawValue)] = .init(pool: mainActorName, priority: "main", capacity: 1)
        return classes
    }

    /// Every class's statistics now; `inProgress`: per class, how long its running jobs have run (nil: none).
    private static func poolReadings(_ classes: [PoolStatsReporter.PoolClass], inProgress: [UInt64]?)
        -> [PoolStatsReporter.PoolClass: PoolStatsReporter.Reading] {
        var readings: [PoolStatsReporter.PoolClass: PoolStatsReporter.Reading] = [:]
        for (index, poolClass) in classes.enumerated() {
            var reading = PoolStatsReporter.Reading.current(poolClass: Int32(index))
            reading.inProgressNanoseconds = inProgress?[index] ?? 0
            readings[poolClass] = reading
        }
        return readings
    }

    /// A snapshot on demand: each busy worker (its job, label and stack, through a borrowed slot, pinned while
    /// signalled), then one line per pool. Idle workers are not signalled.
    private func snapshotParts(_ views: [StarvationWatch.WorkerView], workersAlive: Int,
                               lender: SlotLender) -> [SnapshotCoordinator.Part] {
        var parts: [SnapshotCoordinator.Part] = []
        var busyByPool: [String: Int] = [:]
        var oldestByPool: [String: UInt64] = [:]
        for view in views where view.probe.sequence & 1 == 1 {
            let probe = view.probe
            let name = probe.main_actor == 1 ? mainActorName : poolName
            busyByPool[name, default: 0] += 1
            oldestByPool[name] = min(oldestByPool[name] ?? .max, probe.job_since)
            var part = SnapshotCoordinator.Part(name: name, kind: "worker", tid: view.tid, busySince: probe.job_since)
            part.job = Self.job(of: probe, index: view.index)
            part.labelText = Self.label(index: view.index, sequence: probe.sequence)
            if cstallmon_worker_pin(view.index, view.generation) == 1 {
                var capturer = lender.borrow(for: view.tid)
                part.sample = capturer?.capture(labelID: 0)
                lender.giveBack(&capturer)
                cstallmon_worker_unpin(view.index)
            }
            parts.append(part)
        }
        for name in [poolName, mainActorName] where name == poolName || busyByPool[name] != nil {
            let busy = busyByPool[name] ?? 0
            var part = SnapshotCoordinator.Part(name: name, kind: "pool", tid: nil, busySince: oldestByPool[name])
            part.note = name == poolName
                ? "\(busy) of \(workersAlive) workers busy with its jobs"
                    + (busyByPool[mainActorName].map { ", \($0) with the main actor's" } ?? "")
                : "\(busy) main-actor job running"
            parts.append(part)
        }
        return parts
    }

    /// The job a worker runs, as reports name it (its task's name read while it still runs).
    private static func job(of probe: cstallmon_worker_reading, index: Int32) -> StallReport.Job {
        StallReport.Job(
            executor: probe.main_actor == 1 ? "main" : "global", priority: StallReport.Job.priorityName(probe.priority),
            taskId: probe.kind == 0 ? probe.task_id : nil, kind: StallReport.Job.kindName(probe.kind),
            taskName: probe.named_task == 1 ? taskName(index: index, sequence: probe.sequence) : nil)
    }

    /// The label (`StallLabel`) of the task a worker runs as job `sequence`, if it has one and still runs it.
    private static func label(index: Int32, sequence: UInt64) -> String? {
        readCString(capacity: Int(CSTALLMON_LABEL_MAX_BYTES) + 1) { Int(cstallmon_worker_label(index, sequence, $0, $1)) }
    }

    /// The name of the task a worker runs as job `sequence`, if it has one and still runs it.
    private static func taskName(index: Int32, sequence: UInt64) -> String? {
        readCString(capacity: 256) { Int(cstallmon_worker_task_name(index, sequence, $0, $1)) }
    }

    /// A worker's probe as the detector reads a loop's: a job is an iteration.
    private static func reading(_ probe: cstallmon_worker_reading) -> LoopProbe.Reading {
        probe.sequence & 1 == 1
            ? .busy(iteration: (probe.sequence + 1) / 2, since: probe.job_since)
            : .idle(completedIterations: probe.sequence / 2)
    }

    private func step(_ worker: Worker, _ reading: LoopProbe.Reading, now: UInt64, freezes: FreezeTracker,
                      lender: SlotLender, retired: Bool = false) -> (wakeAt: UInt64, waitedOnItsOwnWork: Bool) {
        let index = worker.index
        let generation = worker.generation
        let tid = worker.tid
        var lent = worker.capturer
        let capture: (UInt32) -> RawSample = { label in
            // Pinned while signalled: the thread cannot finish exiting, so `tid` is still this worker's.
            guard cstallmon_worker_pin(index, generation) == 1 else {
                return RawSample(capturedAt: cstallmon_monotonic_ns(), status: .signalFailed, frames: [],
                                 truncated: false, pauseNanoseconds: 0, labelID: label)
            }
            defer { cstallmon_worker_unpin(index) }
            guard let capturer = lent ?? lender.borrow(for: tid) else {
                return RawSample(capturedAt: cstallmon_monotonic_ns(), status: .notReady, frames: [],
                                 truncated: false, pauseNanoseconds: 0, labelID: label)
            }
            lent = capturer
            return capturer.capture(labelID: label)
        }
        let jobReading = worker.jobReading
        let poolName = poolName
        let mainActorName = mainActorName
        let target = StallTracker.Target(
            tid: tid, capture: capture,
            longIterationRecord: { iteration in
                // A retired worker's probe may already be another thread's: its record is not this job's.
                guard !retired else { return nil }
                var begin: UInt64 = 0
                var end: UInt64 = 0
                guard cstallmon_worker_long_job(index, iteration, &begin, &end) == 1 else { return nil }
                return (begin, end)
            },
            describe: { snapshot in  // at a stall's begin only
                guard let probe = jobReading else { return }
                snapshot.job = Self.job(of: probe, index: index)
                snapshot.labelText = Self.label(index: index, sequence: probe.sequence)
                snapshot.loopName = probe.main_actor == 1 ? mainActorName : poolName
            },
            isAlive: !retired)
        let result = worker.tracker.step(reading, now: now, target: target, freezes: freezes)
        worker.capturer = lent
        return result
    }
}
