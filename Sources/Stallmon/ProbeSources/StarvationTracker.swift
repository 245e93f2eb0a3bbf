import CStallmonCapture
import CStallmonConcurrency
import CStallmonLoopShims
import Foundation
import StallmonLoop
import StallmonReport

/// Starvation of the global executor's pool, as the watchdog sees it pass by pass: a job that waits longer
/// than the threshold because every worker is busy. No single job needs to be slow for that (a pool of two workers
/// held by two 80 ms jobs, with a request queued behind them, is starved at a 100 ms threshold as soon as the
/// request has waited 100 ms), so per-job stall detection does not see it.
///
/// How: while as many workers run medium-priority jobs as the machine has CPUs, it sends the canary
/// (`cstallmon_concurrency_send_canary`, a tiny work item on the medium-priority queue). A canary that has not begun after the threshold means a new job
/// cannot get a worker: the starvation begins, and every busy worker is a culprit: its job, a stack sample now and
/// every sample interval while its job lasts, its scheduler figures. The starvation ends when the canary begins; the
/// report then says how long the pool was saturated, how long the oldest job waited, how many waited, and which
/// culprits held their worker throughout (blocked or computing) or whether the workers ran many jobs (busy).
/// When each of that happens is decided by `StarvationDecision`; this tracker reads the pool, gathers the culprits
/// and writes the reports. An add-on of the pool's probe source (`PoolWorkerSource`), used by the watchdog thread.
final class StarvationTracker {
    private struct Culprit {
        var worker: WorkerReading
        var job: StallReport.Job?
        var label: TaskLabel?
        var since: UInt64
        var samples: [RawSample] = []
        var baseline: ThreadStats?
        var baselineAt: UInt64
        /// When the watchdog first saw its job over (nil while it runs).
        var endedAt: UInt64?
    }

    private struct Episode {
        var id: String
        var detectedAt: UInt64
        var saturatedSince: UInt64
        var canarySent: UInt64
        var culprits: [Culprit]
        var totalsAtBegin: cstallmon_pool_totals
        var delayAtBegin: LoopBusyHistogram
        var workers: Int
    }

    private let poolName: String
    private let client: PipelineMember
    private let writer: ReportWriter
    private let lender: SlotLender
    private let threshold: UInt64
    private let sampleInterval: UInt64
    private let maxSamples: Int
    /// Threads the canary's queue can have: the machine's CPUs.
    private let capacity: Int
    private var decision: StarvationDecision
    /// The starvation in progress, as its report will tell it.
    private var episode: Episode?
    private var sampler: ThreadSampler

    init(poolName: String, client: PipelineMember, writer: ReportWriter, lender: SlotLender) {
        self.poolName = poolName
        self.client = client
        self.writer = writer
        self.lender = lender
        sampler = ThreadSampler(counters: client.counters)
        let configuration = client.configuration
        threshold = UInt64(configuration.detection.threshold.nanosecondsClamped)
        sampleInterval = UInt64(configuration.detection.sampleInterval.nanosecondsClamped)
        maxSamples = max(1, min(configuration.detection.maxSamples, 50))
        capacity = max(1, sysconf(Int32(_SC_NPROCESSORS_ONLN)))
        decision = StarvationDecision(threshold: threshold, sampleInterval: sampleInterval)
    }

    var isStarving: Bool { decision.isStarving }

    /// One pass over the pool's workers as this pass read them. Returns when the tracker wants the next pass.
    func pass(now: UInt64, workers: [WorkerReading]) -> UInt64 {
        // The canary's queue is full when as many of its jobs run as it has room for (libdispatch gives each
        // priority's queue as many threads as CPUs; a worker of another priority, idle or busy, is no room for it and
        // no culprit of its starvation).
        let busy = workers.filter {
            $0.isAlive && $0.isRunningJob && $0.poolClass == Int32(CSTALLMON_POOL_MEDIUM.rawValue)
        }
        if decision.isSaturated { noteCulpritsThatEnded(now: now, workers: workers) }
        let (action, wakeAt) = decision.pass(now: now, saturated: busy.count >= capacity, canary: Self.canary())
        switch action {
        case .sendCanary: _ = cstallmon_concurrency_send_canary()
        case .begin(let canarySent): begin(now: now, canarySent: canarySent, busy: busy)
        case .sampleCulprits: sampleCulprits()
        case .finish(let canaryStarted): finish(now: now, canaryStarted: canaryStarted)
        case nil: break
        }
        return wakeAt
    }

    /// The latest canary, as the decision reads it.
    private static func canary() -> StarvationDecision.Canary {
        var sent: UInt64 = 0
        var started: UInt64 = 0
        switch cstallmon_concurrency_canary(&sent, &started) {
        case 1: return .waiting(sent: sent)
        case 0: return .ran(sent: sent, started: started)
        default: return .none
        }
    }

    /// Culprits whose job ended (the worker moved on, or its thread exited) keep what they had.
    private func noteCulpritsThatEnded(now: UInt64, workers: [WorkerReading]) {
        guard var current = episode else { return }
        let byIndex = Dictionary(uniqueKeysWithValues: workers.map { ($0.index, $0) })
        for position in current.culprits.indices where current.culprits[position].endedAt == nil {
            let culprit = current.culprits[position]
            if let seen = byIndex[culprit.worker.index], seen.isSameJob(as: culprit.worker) { continue }
            current.culprits[position].endedAt = now
        }
        episode = current
    }

    private func sampleCulprits() {
        guard var current = episode else { return }
        for position in current.culprits.indices where current.culprits[position].endedAt == nil
            && current.culprits[position].samples.count < maxSamples {
            current.culprits[position].samples.append(sample(current.culprits[position].worker))
        }
        episode = current
    }

    /// The watchdog stops during a starvation: written as ongoing, as a stall would be.
    func stopMidStarvation(now: UInt64) {
        guard decision.stop(), episode != nil else { return }
        finish(now: now, canaryStarted: nil)
    }

    private func begin(now: UInt64, canarySent: UInt64, busy: [WorkerReading]) {
        var culprits: [Culprit] = busy.map { worker in
            Culprit(worker: worker, job: worker.job, label: worker.label, since: worker.jobSince,
                    baseline: ThreadStats.read(tid: worker.tid), baselineAt: now)
        }
        culprits.sort { $0.since < $1.since }
        sampler.forgetDescriptors()
        for position in culprits.indices {
            culprits[position].samples.append(sample(culprits[position].worker))
        }
        // The last worker was taken when its job began; a pool busy with ever-new jobs was full at least since the
        // canary was sent.
        let lastTaken = culprits.map(\.since).max() ?? canarySent
        let before = Self.globalTotals()
        episode = Episode(id: UUID().uuidString.lowercased(), detectedAt: now,
                          saturatedSince: min(lastTaken, canarySent), canarySent: canarySent, culprits: culprits,
                          totalsAtBegin: before.totals, delayAtBegin: before.delay, workers: busy.count)
        client.counters.stallsDetected.wrappingAdd(1, ordering: .relaxed)
        if let snapshot = snapshot(now: now, end: now, ongoing: true) {
            writer.submit(.begin(snapshot), from: client)
        }
    }

    private func finish(now: UInt64, canaryStarted: UInt64?) {
        guard let snapshot = snapshot(now: now, end: canaryStarted ?? now, ongoing: canaryStarted == nil) else {
            episode = nil
            return
        }
        writer.submit(canaryStarted == nil ? .interim(snapshot) : .finish(snapshot), from: client)
        episode = nil
    }

    /// The report's snapshot: the saturation up to `end` (the canary's begin), every culprit as a stall of its own.
    private func snapshot(now: UInt64, end: UInt64, ongoing: Bool) -> StallEvidence? {
        guard let episode else { return nil }
        let later = Self.globalTotals()
        let counted = cstallmon_concurrency_statistics() == 1  // jobs are counted (pool_statistics = on)
        var culprits: [StarvationEvidence.Culprit] = []
        var heldClasses: [StallClass] = []
        for culprit in episode.culprits {
            let jobEnd = Self.jobEnd(since: culprit.since, endedAt: culprit.endedAt, saturationEnd: end)
            // Held throughout: busy for at least 90 % of the saturation (a job that ended a pass before the canary
            // began, as the worker freed by it ran the canary, still held the pool).
            let saturated = end &- min(end, episode.saturatedSince)
            let held = jobEnd &- min(jobEnd, max(culprit.since, episode.saturatedSince))
            let heldThroughout = saturated == 0 || held * 10 >= saturated * 9
            var snapshot = StallEvidence(
                id: episode.id, loopName: poolName, threadID: culprit.worker.tid, thresholdNanoseconds: threshold,
                since: culprit.since, sinceWall: Self.wall(of: culprit.since, now: now),
                durationNanoseconds: jobEnd &- culprit.since, durationExact: false, ongoing: ongoing,
                elapsedAtDetection: episode.detectedAt - min(episode.detectedAt, culprit.since), labelID: 0,
                samples: culprit.samples)
            snapshot.job = culprit.job
            snapshot.taskLabel = culprit.label
            if let baseline = culprit.baseline, let stats = ThreadStats.read(tid: culprit.worker.tid),
               now > culprit.baselineAt {
                let wall = now - culprit.baselineAt
                let cpu = min(stats.cpuNanoseconds &- baseline.cpuNanoseconds, wall)
                let delay = min(stats.runDelayNanoseconds &- baseline.runDelayNanoseconds, wall - cpu)
                snapshot.threadClass = StallClassifier.classify(cpu: cpu, runDelay: delay, wall: wall)
            } else {
                // No scheduler figures: what the samples saw (asleep in a call, or running).
                let asleep = culprit.samples.filter { $0.threadState == "S" || $0.threadState == "D" }.count
                snapshot.threadClass = asleep * 2 > culprit.samples.count ? .blocked : .cpu
            }
            if heldThroughout { heldClasses.append(snapshot.threadClass) }
            culprits.append(StarvationEvidence.Culprit(snapshot: snapshot, heldThroughout: heldThroughout))
        }
        let verdict = heldClasses.isEmpty ? "busy" : heldClasses.contains(.blocked) ? "blocked" : "cpu"
        let delay = later.delay.subtracting(episode.delayAtBegin)
        let oldestJob = delay.percentile(1).map { UInt64($0.nanosecondsClamped) } ?? 0
        let canaryWait = end &- episode.canarySent
        let starvation = StarvationEvidence(
            culprits: culprits, verdict: verdict, saturatedNanoseconds: end &- episode.saturatedSince,
            oldestWaitNanoseconds: max(canaryWait, oldestJob),
            waitedJobs: counted ? later.totals.long_delays &- episode.totalsAtBegin.long_delays : nil,
            jobsRun: counted ? later.totals.jobs &- episode.totalsAtBegin.jobs : nil, workers: episode.workers,
            poolWidth: PoolWidth.atStart, cpuLimit: Watchdog.process.cpuContention.cgroup?.limit.cpus)
        let first = culprits.first?.snapshot
        var snapshot = StallEvidence(
            id: episode.id, loopName: poolName, threadID: first?.threadID ?? 0, thresholdNanoseconds: threshold,
            since: episode.saturatedSince, sinceWall: Self.wall(of: episode.saturatedSince, now: now),
            durationNanoseconds: end &- episode.saturatedSince, durationExact: false, ongoing: ongoing,
            elapsedAtDetection: episode.detectedAt &- episode.saturatedSince, labelID: 0,
            samples: culprits.flatMap(\.snapshot.samples))
        snapshot.job = first?.job
        snapshot.taskLabel = first?.taskLabel
        snapshot.threadClass = verdict == "blocked" ? .blocked : .cpu
        snapshot.sections.append(StarvationSection(starvation: starvation))
        return snapshot
    }

    /// Where a culprit's job ends in the report: when the watchdog saw it over, else at the saturation's end, never
    /// before the job began (a job that began after the pass read the clock, on a worker read later, would otherwise
    /// get a duration that wraps around).
    static func jobEnd(since: UInt64, endedAt: UInt64?, saturationEnd: UInt64) -> UInt64 {
        max(since, min(endedAt ?? saturationEnd, max(saturationEnd, since)))
    }

    /// One sample of a culprit: what it is blocked in (before the signal), then its stack, pinned so its thread
    /// cannot exit meanwhile.
    private func sample(_ worker: WorkerReading) -> RawSample {
        let lender = lender
        return sampler.sample(worker.tid) { _, _ in
            guard var result = ThreadSampler.capturePinned(worker, lender: lender,
                                                           noSlot: .failed(.notReady, labelID: 0)) else {
                return .failed(.signalFailed, labelID: 0)
            }
            // A culprit is its worker over the whole saturation: the jobs that followed its first are what a busy
            // pool's workers ran, evidence for the verdict (its `job` and `label` stay the first job's).
            result.afterJobEnded = false
            return result
        }
    }

    private static func wall(of monotonic: UInt64, now: UInt64) -> UInt64 {
        let wallNow = cstallmon_realtime_ns()
        return wallNow - min(wallNow, now &- min(now, monotonic))
    }

    /// The global executor's totals and queue-delay histogram, over its four priority bands.
    private static func globalTotals() -> (totals: cstallmon_pool_totals, delay: LoopBusyHistogram) {
        var totals = cstallmon_pool_totals()
        var delayCounts = [UInt64](repeating: 0, count: LoopBusyHistogram.bucketCount)
        for poolClass in [CSTALLMON_POOL_HIGH, CSTALLMON_POOL_MEDIUM, CSTALLMON_POOL_LOW, CSTALLMON_POOL_BACKGROUND] {
            let part = PoolStatsReporter.Reading.current(poolClass: Int32(poolClass.rawValue))
            totals.jobs &+= part.totals.jobs
            totals.long_delays &+= part.totals.long_delays
            for index in delayCounts.indices { delayCounts[index] &+= part.delay.counts[index] }
        }
        return (totals, LoopBusyHistogram(counts: delayCounts))
    }
}
