import CStallmonConcurrency
import CStallmonLoopShims
import Logging
import StallmonLoop
import StallmonReport
#if canImport(Glibc)
import Glibc
#endif

/// The probe source of Swift Concurrency's global executor: every pass reads each worker's probe
/// (`CStallmonConcurrency`), and a `StallTracker` per worker decides, samples and reports, exactly as for a loop
/// thread; starvation of the pool is watched beside them (`StarvationTracker`). A worker's capture slot is borrowed
/// when its stall begins and returned when it ends, and the worker is pinned while it is signalled, so its thread
/// cannot finish exiting (and its id cannot be reused) meanwhile.
final class PoolWorkerSource: ProbeSource {
    /// One worker as this source knows it: a thread in a probe (a new thread in the same probe is a new worker).
    private final class Worker {
        let index: Int32
        let generation: UInt32
        let tid: Int32
        let tracker: StallTracker
        var capturer: StackCapturer?
        /// The probe as it was read while the latest job ran: the attributes of the stall that job may become.
        var jobReading: WorkerReading?

        init(_ reading: WorkerReading, tracker: StallTracker) {
            index = reading.index
            generation = reading.generation
            tid = reading.tid
            self.tracker = tracker
        }
    }

    private let poolName: String
    /// The `loop` of a main-actor job's report: the main actor is no pool, though a pool's worker runs it.
    private let mainActorName: String
    private let collaborators: StallTracker.Collaborators
    private let configuration: StallMonitorConfiguration
    /// The longest a pass waits when no worker asks for sooner.
    private let idlePoll: UInt64
    private let poolClasses: [PoolStatsReporter.PoolClass]
    private var workers: [Int32: Worker] = [:]
    private let lender: SlotLender
    /// Made on the watchdog thread when statistics are first due, as its metrics are (see `LoopThreadSource`).
    private var poolStats: PoolStatsReporter?
    /// Made at the first pass, on the watchdog thread (swift-metrics binds a metric to the factory of its making).
    private var droppedLabels: DroppedLabelsCounter?
    /// The label count when the monitor was made: drops before it are not this monitor's to report.
    private let droppedLabelsAtStart = cstallmon_labels_dropped()
    /// The pool's statistics when the monitor was created: its figures count jobs from then on.
    private let statisticsBaseline: (at: UInt64, readings: [PoolStatsReporter.PoolClass: PoolStatsReporter.Reading])
    private let starvation: StarvationTracker
    /// The CPU limit's throttling over the same windows as the `pool.stats` lines.
    private var throttlingWindow = CPUContention.ThrottlingWindow()
    /// When the throttling window is closed even without a line (no class ran a job): a line's figures never span
    /// more than about one interval.
    private var throttlingDue: UInt64 = 0
    /// Whether the pool's width was checked against the CPU limit (once, at the first pass).
    private var widthChecked = false
    /// As of the latest pass: per pool class, how long its running jobs have run; the live workers.
    private var inProgress: [UInt64] = []
    private var workersAlive = 0
    /// The latest pass's readings of the workers.
    private var readings: [WorkerReading] = []

    init(poolName: String, mainActorName: String, collaborators: StallTracker.Collaborators) {
        self.poolName = poolName
        self.mainActorName = mainActorName
        self.collaborators = collaborators
        configuration = collaborators.client.configuration
        idlePoll = StallTracker.detectorConfiguration(configuration).idlePoll
        lender = SlotLender(maxFrames: configuration.detection.maxFrames, timeout: configuration.detection.captureTimeout,
                            maxOwedSlots: 8)
        poolClasses = Self.poolClasses(poolName: poolName, mainActorName: mainActorName)
        statisticsBaseline = (cstallmon_monotonic_ns(), Self.poolReadings(poolClasses, inProgress: nil))
        starvation = StarvationTracker(poolName: poolName, client: collaborators.client, writer: collaborators.writer,
                                     lender: lender)
    }

    func pass(now: UInt64, freezes: FreezeTracker) -> ProbePass {
        if !widthChecked {
            widthChecked = true
            warnIfWiderThanTheLimit()
        }
        var pass = ProbePass(wakeAt: now + idlePoll)
        // Both buffers are kept from pass to pass: an idle pass allocates nothing.
        if inProgress.count == poolClasses.count {
            for index in inProgress.indices { inProgress[index] = 0 }
        } else {
            inProgress = [UInt64](repeating: 0, count: poolClasses.count)
        }
        workersAlive = 0
        readings.removeAll(keepingCapacity: true)
        for index in Int32(0)..<cstallmon_workers_used() {
            let reading = WorkerReading.read(index: index)
            if let known = workers[index], reading?.generation != known.generation {
                retire(known, now: now, freezes: freezes, into: &pass)
            }
            guard let reading else { continue }
            readings.append(reading)
            if reading.isAlive { workersAlive += 1 }
            if reading.isRunningJob, Int(reading.poolClass) < inProgress.count {
                inProgress[Int(reading.poolClass)] += now &- min(now, reading.jobSince)
            }
            step(worker(for: reading), reading, now: now, freezes: freezes, into: &pass)
        }
        let wasStarving = starvation.isStarving
        pass.wakeAt = min(pass.wakeAt, starvation.pass(now: now, workers: readings))
        // Sampling culprits waits on captures, and a report on the writer.
        pass.waitedOnItsOwnWork = pass.waitedOnItsOwnWork || wasStarving || starvation.isStarving
        var dropped = droppedLabels ?? DroppedLabelsCounter(dropped: droppedLabelsAtStart,
                                                          logger: collaborators.client.logger)
        dropped.step(now: now, dropped: cstallmon_labels_dropped())
        droppedLabels = dropped
        return pass
    }

    var statisticsDue: UInt64? { configuration.analysis.poolStatistics ? poolStats?.nextDue ?? 0 : nil }

    func exportStatistics(now: UInt64) {
        guard var reporter = poolStats else {
            // The windows open at the monitor's creation.
            var reporter = PoolStatsReporter(lineInterval: configuration.analysis.loopStatsInterval)
            _ = reporter.step(now: statisticsBaseline.at, readings: statisticsBaseline.readings, workers: [:])
            poolStats = reporter
            _ = throttlingWindow.close(Watchdog.process.cpuContention)  // opens its window
            throttlingDue = now &+ UInt64(configuration.analysis.loopStatsInterval.nanosecondsClamped)
            return
        }
        defer { poolStats = reporter }
        let windows = reporter.step(now: now, readings: Self.poolReadings(poolClasses, inProgress: inProgress),
                                    workers: [poolName: workersAlive])
        let interval = UInt64(configuration.analysis.loopStatsInterval.nanosecondsClamped)
        guard !windows.isEmpty else {
            if interval > 0 && now >= throttlingDue {
                _ = throttlingWindow.close(Watchdog.process.cpuContention)
                throttlingDue = now &+ interval
            }
            return
        }
        let throttling = throttlingWindow.close(Watchdog.process.cpuContention)
        throttlingDue = now &+ interval
        let width = PoolWidth.atStart
        for var window in windows {
            window.throttling = throttling
            if window.workers != nil { window.poolWidth = width }
            collaborators.writer.submit(.poolStats(window), from: collaborators.client)
        }
    }

    /// One warning when the pool may run more workers at once than the CPU limit gives CPUs: its bursts then use up
    /// the quota and throttle the whole process. Read on the watchdog, never on a worker.
    private func warnIfWiderThanTheLimit() {
        guard let limit = Watchdog.process.cpuContention.cgroup?.limit else { return }
        let width = PoolWidth.atStart
        if let warning = PoolWidth.warning(width: width, limit: limit) {
            collaborators.client.logger.warning("stallmon: \(warning)",
                                                metadata: ["pool": "\(poolName)", "poolWidth": "\(width)",
                                                           "cpuLimit": "\(PoolWidth.cpus(limit.cpus))"])
        }
    }

    /// A snapshot on demand: each busy worker (its job, label and stack, through a borrowed slot, pinned while
    /// signalled), then one line per pool. Idle workers are not signalled.
    func snapshotParts() -> (parts: [SnapshotCoordinator.Part], waitedOnItsOwnWork: Bool) {
        var parts: [SnapshotCoordinator.Part] = []
        var busyByPool: [String: Int] = [:]
        var oldestByPool: [String: UInt64] = [:]
        var alive = 0
        for index in Int32(0)..<cstallmon_workers_used() {
            guard let reading = WorkerReading.read(index: index) else { continue }
            if reading.isAlive { alive += 1 }
            guard reading.isRunningJob else { continue }
            let name = reading.runsMainActor ? mainActorName : poolName
            busyByPool[name, default: 0] += 1
            oldestByPool[name] = min(oldestByPool[name] ?? .max, reading.jobSince)
            var part = SnapshotCoordinator.Part(name: name, kind: "worker", tid: reading.tid,
                                                busySince: reading.jobSince)
            part.job = reading.job
            part.taskLabel = reading.label
            // No free slot: the entry has no sample, as one taken after its job ended.
            if let sample = ThreadSampler.capturePinned(reading, lender: lender, noSlot: nil) {
                // A stack taken once the job was over is another job's: the entry then has none.
                part.sample = sample.afterJobEnded ? nil : sample
                if reading.isDrain, let sample = part.sample, sample.status == .ok {
                    // A drain job moves from task to task: the entry's label is that of the task its stack was
                    // taken in, or none when that can no longer be told.
                    part.taskLabel = reading.drainedLabel(of: sample)
                }
            }
            parts.append(part)
        }
        for name in [poolName, mainActorName] where name == poolName || busyByPool[name] != nil {
            let busy = busyByPool[name] ?? 0
            var part = SnapshotCoordinator.Part(name: name, kind: "pool", tid: nil, busySince: oldestByPool[name])
            part.note = name == poolName
                ? "\(busy) of \(alive) workers busy with its jobs"
                    + (busyByPool[mainActorName].map { ", \($0) with the main actor's" } ?? "")
                : "\(busy) main-actor job running"
            parts.append(part)
        }
        // Each busy worker's capture waits up to capture_timeout_ms.
        return (parts, parts.contains { $0.sample != nil })
    }

    /// Stopping: a stall whose job ends within a short grace (stop() often comes right after the work that
    /// stalled, while its worker is still finishing the job) is finished as usual; one still going on after it
    /// is left as an ongoing report, as is a starvation.
    func stop(freezes: FreezeTracker) {
        let threshold = UInt64(configuration.detection.threshold.nanosecondsClamped)
        let grace = cstallmon_monotonic_ns() + min(UInt64(50_000_000), threshold)
        var stalled = workers.values.filter(\.tracker.isStalled)
        while !stalled.isEmpty {
            let now = cstallmon_monotonic_ns()
            for worker in stalled {
                guard let reading = WorkerReading.read(index: worker.index), reading.generation == worker.generation,
                      !reading.isRunningJob || !worker.tracker.isTracking(iteration: reading.jobNumber)
                else { continue }
                var ignored = ProbePass(wakeAt: now)
                step(worker, reading, now: now, freezes: freezes, into: &ignored)
            }
            stalled.removeAll { !$0.tracker.isStalled }
            if now >= grace { break }
            usleep(1000)
        }
        starvation.stopMidStarvation(now: cstallmon_monotonic_ns())
        for worker in workers.values {
            worker.tracker.stopMidStall(now: cstallmon_monotonic_ns(), tid: worker.tid, freezes: freezes)
            lender.giveBack(&worker.capturer)
        }
    }

    // MARK: - Workers

    /// The worker `reading` shows, known or new.
    private func worker(for reading: WorkerReading) -> Worker {
        if let known = workers[reading.index] { return known }
        let tracker = StallTracker(loopName: poolName, annotations: nil, collaborators: collaborators)
        let created = Worker(reading, tracker: tracker)
        workers[reading.index] = created
        return created
    }

    /// The worker's thread exited (its last job ended before it did): a stall in progress ends now.
    private func retire(_ worker: Worker, now: UInt64, freezes: FreezeTracker, into pass: inout ProbePass) {
        let retiring = WorkerReading(index: worker.index, raw: cstallmon_worker_reading())
        step(worker, retiring, now: now, freezes: freezes, into: &pass, retired: true)
        lender.giveBack(&worker.capturer)
        workers[worker.index] = nil
    }

    private func step(_ worker: Worker, _ reading: WorkerReading, now: UInt64, freezes: FreezeTracker,
                      into pass: inout ProbePass, retired: Bool = false) {
        // The job's attributes, for the stall it may become: refreshed for every job but the one already stalled
        // (a next job that crosses the threshold in the pass that ends the previous stall is its own).
        if !retired, reading.isRunningJob, !worker.tracker.isTracking(iteration: reading.jobNumber) {
            worker.jobReading = reading
        }
        if !retired, let wake = worker.tracker.idleWake(reading.loopReading, now: now) {
            pass.wakeAt = min(pass.wakeAt, wake)
            if worker.capturer != nil { lender.giveBack(&worker.capturer) }
            return
        }
        let target = self.target(for: worker, retired: retired)
        let result = worker.tracker.step(retired ? .idle(completedIterations: 0) : reading.loopReading, now: now,
                                         target: target.target, freezes: freezes)
        worker.capturer = target.lent()
        pass.wakeAt = min(pass.wakeAt, result.wakeAt)
        pass.waitedOnItsOwnWork = pass.waitedOnItsOwnWork || result.waitedOnItsOwnWork
        if !worker.tracker.isStalled { lender.giveBack(&worker.capturer) }
    }

    /// What the worker's tracker needs for one step; `lent()` is the capturer the step borrowed (or kept).
    private func target(for worker: Worker, retired: Bool)
        -> (target: StallTracker.Target, lent: () -> StackCapturer?) {
        let index = worker.index
        let generation = worker.generation
        let tid = worker.tid
        let lender = lender
        var lent = worker.capturer
        let jobReading = worker.jobReading
        let capture: (UInt32) -> RawSample = { label in
            // Pinned while signalled: the thread cannot finish exiting, so `tid` is still this worker's.
            guard cstallmon_worker_pin(index, generation) == 1 else { return .failed(.signalFailed, labelID: label) }
            defer { cstallmon_worker_unpin(index) }
            guard let capturer = lent ?? lender.borrow(for: tid) else { return .failed(.notReady, labelID: label) }
            lent = capturer
            return capturer.capture(labelID: label, jobOf: jobReading)
        }
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
                guard let reading = jobReading else { return }
                snapshot.job = reading.job
                snapshot.taskLabel = reading.label
                snapshot.loopName = reading.runsMainActor ? mainActorName : poolName
            },
            isAlive: !retired)
        return (target, { lent })
    }

    // MARK: - Statistics

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
}
