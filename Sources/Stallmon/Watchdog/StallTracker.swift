import CStallmonCapture
import Foundation
import Logging
import Metrics
import StallmonLoop
import StallmonReport
import Synchronization

/// The stalls of one watched thread, as a watchdog thread sees them pass by pass: lets `StallDetector` decide,
/// takes the samples, and hands begin, interim and final snapshots to the writer. A loop's source has one; the
/// global executor's source has one per worker. Used by the watchdog thread only (or under its lock for the source).
final class StallTracker {
    /// What a tracker needs of the thread it watches, for one pass.
    struct Target {
        var tid: Int32
        /// Takes one stack sample (nil: no capture is possible now, e.g. no slot); the label of the work in progress.
        var capture: ((UInt32) -> RawSample)?
        /// The exact begin and end of a finished long iteration (job), when the thread recorded it.
        var longIterationRecord: (UInt64) -> (begin: UInt64, end: UInt64)?
        var currentLabel: () -> UInt32 = { 0 }
        /// The label of `iteration`'s work, read while that iteration still runs; nil once the thread moved past it
        /// (the stall ended between the pass's reading and now, and the label read would be the next work's). When
        /// this is nil, `currentLabel` is read as is.
        var labelOfIteration: ((_ iteration: UInt64) -> UInt32?)? = nil
        var currentMode: () -> String? = { nil }
        /// Fills in what is particular to this kind of thread (a job's priority and task id, say).
        var describe: (inout StallEvidence) -> Void = { _ in }
        /// False once the thread exited (a retired worker): its id may be another thread's, so its /proc figures
        /// are not read.
        var isAlive = true
    }

    private struct Current {
        var snapshot: StallEvidence
        var lastSeenBusy: UInt64
        /// Where the stall stands against `systemd_hang_after_ms` (past it and acted on: systemd's watchdog starves).
        var systemdHang = HangProgress.notYet
        /// Where it stands against `hang_abort_after_ms`.
        var abortHang = HangProgress.notYet
        /// This stall's own baseline: the shared one moves on as soon as the watchdog sees the next iteration busy,
        /// which, for back-to-back stalls, happens before this one is finished.
        var baseline: Baseline?
        /// The host's steal and the watchdog's own run delay when the stall was detected.
        var stealAtDetection: CPUContention.StealReading?
        var watchdogRunDelayAtDetection: UInt64?
    }

    /// A hang limit, as a stall passes it: its report is handed to the writer, and the hang is acted on once the
    /// writer made it durable, or 5 s later if it cannot (the pass never waits for it: other threads' stalls would
    /// wait with it).
    enum HangProgress: Equatable {
        case notYet
        /// The hang's report was queued (`ticket`, nil: the queue was full); acted on at `deadline` at the latest.
        case writing(ticket: UInt64?, deadline: UInt64)
        case actedOn
    }

    /// How long a hang waits for its report to be durable before it is acted on all the same.
    static let hangDurabilityTimeout: UInt64 = 5_000_000_000
    /// How often a pass looks whether the hang's report is durable yet.
    static let hangDurabilityPoll: UInt64 = 5_000_000

    /// Scheduler figures of the thread when the watchdog first saw an iteration busy.
    private struct Baseline {
        var iteration: UInt64
        var stats: ThreadStats
        var at: UInt64
        /// The cgroup's throttling and the CPU pressure at the same moment.
        var contention: CPUContention.Reading
    }

    /// What a tracker works with besides the thread it watches, handed to it by the monitor that owns it.
    struct Collaborators {
        var client: PipelineMember
        var writer: ReportWriter
        /// The process's stalls in progress, which systemd's watchdog pings go by.
        var hangs: HangRegistry
        /// The process's CPU limit, pressure and steal.
        var contention: CPUContention
        /// Whether systemd's watchdog is fed in this process (`SystemdNotifier`): then a stall past
        /// `systemd_hang_after_ms` is marked hung.
        var systemdIsFed: () -> Bool
        var stallCounter: Counter
        var stallDuration: Metrics.Timer

        /// The process's own registry and notifier, and the monitor's metrics under `name`.
        static func process(client: PipelineMember, writer: ReportWriter, name: String) -> Collaborators {
            Collaborators(client: client, writer: writer, hangs: Watchdog.process.hangs,
                          contention: Watchdog.process.cpuContention,
                          systemdIsFed: { Watchdog.process.systemd.isFeeding },
                          stallCounter: Counter(label: "stallmon_stalls_total", dimensions: [("loop", name)]),
                          stallDuration: Metrics.Timer(label: "stallmon_stall_duration", dimensions: [("loop", name)]))
        }
    }

    let loopName: String
    private let client: PipelineMember
    private let writer: ReportWriter
    private let annotations: IterationAnnotations?
    private let stallCounter: Counter
    private let stallDuration: Metrics.Timer
    private let hangs: HangRegistry
    private let contention: CPUContention
    private let systemdIsFed: () -> Bool
    private var detector: StallDetector
    private var current: Current?
    private var baseline: Baseline?
    private var sampler: ThreadSampler
    private let holders: HolderSampler
    private var warnedAboutBlockedSignal = false
    private var warnedAboutReplacedHandler = false

    init(loopName: String, annotations: IterationAnnotations?, collaborators: Collaborators) {
        self.loopName = loopName
        client = collaborators.client
        writer = collaborators.writer
        hangs = collaborators.hangs
        contention = collaborators.contention
        systemdIsFed = collaborators.systemdIsFed
        stallCounter = collaborators.stallCounter
        stallDuration = collaborators.stallDuration
        self.annotations = annotations
        let configuration = client.configuration
        detector = StallDetector(configuration: Self.detectorConfiguration(configuration))
        sampler = ThreadSampler(counters: client.counters)
        // A holder's capture waits at most 20 ms: the thread's own sample comes after it, and must not be held up by
        // a holder that is slow to take the signal (a late handler drains its slot as usual).
        holders = HolderSampler(maxFrames: configuration.detection.maxFrames,
                                timeout: min(configuration.detection.captureTimeout, .milliseconds(20)),
                                stacks: configuration.analysis.lockHolderStacks)
    }

    deinit {
        holders.endStall()
    }

    static func detectorConfiguration(_ configuration: StallMonitorConfiguration) -> StallDetector.Configuration {
        StallDetector.Configuration(
            threshold: UInt64(configuration.detection.threshold.nanosecondsClamped),
            sampleInterval: UInt64(configuration.detection.sampleInterval.nanosecondsClamped),
            maxSamples: configuration.detection.maxSamples,
            interimAfter: UInt64(configuration.detection.interimAfter.nanosecondsClamped))
    }

    /// Whether a stall is in progress.
    var isStalled: Bool { current != nil }

    /// When the next pass is due for an idle `reading` with nothing tracked, the commonest pass: `step` would
    /// decide exactly this, and the caller can skip building the target (closures: allocations on every pass).
    /// nil when `step` must run.
    func idleWake(_ reading: LoopProbe.Reading, now: UInt64) -> UInt64? {
        guard case .idle = reading, current == nil, detector.tracking == nil else { return nil }
        return now + detector.configuration.idlePoll
    }

    /// Where the stall in progress stands against the hang limits (tests read it).
    var hangProgress: (systemd: HangProgress, abort: HangProgress) {
        (current?.systemdHang ?? .notYet, current?.abortHang ?? .notYet)
    }

    /// Whether the stall in progress is that of `iteration`.
    func isTracking(iteration: UInt64) -> Bool {
        detector.tracking?.iteration == iteration
    }

    /// One pass over `reading`, the thread's probe read at `now`. Returns when the tracker wants the next pass, and
    /// whether this pass waited on work of its own (a capture's handler; never the writer, whom a hang's later passes
    /// ask): its length is then no sign of a freeze (`FreezeDetector.passEnds`).
    func step(_ reading: LoopProbe.Reading, now: UInt64, target: Target,
              freezes: FreezeTracker) -> (wakeAt: UInt64, waitedOnItsOwnWork: Bool) {
        var waitedOnItsOwnWork = false
        // The detector sees the iteration as if it began later by the time the whole process was frozen, so a
        // SIGSTOP or VM pause is never mistaken for a stall.
        var adjusted = reading
        if case .busy(let iteration, let since) = reading {
            adjusted = .busy(iteration: iteration, since: since + freezes.overlap(start: since, end: now))
            if baseline?.iteration != iteration, let stats = ThreadStats.read(tid: target.tid) {
                baseline = Baseline(iteration: iteration, stats: stats, at: now,
                                    contention: contention.read(now: now))
            }
        }
        let (actions, wakeAt) = detector.step(adjusted, now: now)
        for action in actions {
            switch action {
            case .begin(let iteration, _):
                guard case .busy(_, let since) = reading else { break }
                waitedOnItsOwnWork = beginStall(iteration: iteration, since: since, now: now, target: target)
                    || waitedOnItsOwnWork
            case .sample:
                if let capture = target.capture, current != nil {
                    waitedOnItsOwnWork = true
                    let sample = takeSample(capture, target: target)
                    current?.snapshot.samples.append(sample)
                    warnAboutMissingStacks(sample, tid: target.tid)
                }
                current?.lastSeenBusy = now
            case .interim:
                guard let snapshot = ongoingSnapshot(now: now, freezes: freezes, tid: target.tid) else { break }
                writer.submit(.interim(snapshot), from: client)
            case .finish(let iteration, _):
                finishStall(iteration: iteration, now: now, target: target, freezes: freezes)
            }
        }
        if case .busy = reading, current != nil { current?.lastSeenBusy = now }
        var wake = wakeAt
        if current != nil, let next = actOnHang(now: now, target: target, freezes: freezes) {
            wake = min(wake, next)
        }
        return (wake, waitedOnItsOwnWork)
    }

    /// A stall of `iteration` (begun at `since`) was detected: its first sample, its begin report, the hang
    /// registry told. Returns whether a sample was taken (the pass then waited on its handler).
    private func beginStall(iteration: UInt64, since: UInt64, now: UInt64, target: Target) -> Bool {
        // Counted once its label and first sample were read: a thread that waits for the count to see its stall
        // detected (a test, a drain) cannot end the iteration before they are.
        defer { client.counters.stallsDetected.wrappingAdd(1, ordering: .releasing) }
        stallCounter.increment()
        let wallNow = cstallmon_realtime_ns()
        var snapshot = StallEvidence(
            id: UUID().uuidString.lowercased(), loopName: loopName, threadID: target.tid,
            thresholdNanoseconds: UInt64(client.configuration.detection.threshold.nanosecondsClamped), since: since,
            sinceWall: wallNow - min(wallNow, now - since), durationNanoseconds: now - since,
            durationExact: false, ongoing: true, elapsedAtDetection: now - since,
            labelID: target.labelOfIteration.map { $0(iteration) ?? 0 } ?? target.currentLabel(), samples: [])
        snapshot.annotations = annotations?.values(for: iteration) ?? [:]
        snapshot.mode = target.currentMode()
        target.describe(&snapshot)
        sampler.forgetDescriptors()
        holders.endStall()
        if let capture = target.capture { snapshot.samples.append(takeSample(capture, target: target)) }
        let onWatchdog = Watchdog.process.isCurrentThread
        current = Current(snapshot: snapshot, lastSeenBusy: now,
                          baseline: baseline?.iteration == iteration ? baseline : nil,
                          stealAtDetection: onWatchdog ? contention.readSteal(now: now) : nil,
                          watchdogRunDelayAtDetection: onWatchdog ? ThreadStats.ownRunDelay() : nil)
        hangs.began(id: snapshot.id, loop: loopName, since: since)
        writer.submit(.begin(snapshot), from: client)
        return target.capture != nil
    }

    /// The stall's iteration ended: its final report, with the exact end when the thread recorded it, frozen time
    /// set aside and where the thread's time went.
    private func finishStall(iteration: UInt64, now: UInt64, target: Target, freezes: FreezeTracker) {
        guard var snapshot = current?.snapshot else { return }
        var end = current?.lastSeenBusy ?? now
        if let record = target.longIterationRecord(iteration) {
            end = record.end
            snapshot.durationExact = true
        } else {
            snapshot.durationExact = false  // the thread overwrote the record: this thread was starved
        }
        snapshot.frozenNanoseconds = frozenTime(since: snapshot.since, end: end, now: now, freezes: freezes,
                                                tid: target.tid)
        snapshot.durationNanoseconds = end - snapshot.since - min(snapshot.frozenNanoseconds, end - snapshot.since)
        snapshot.ongoing = false
        snapshot.hang = nil  // the final report replaces the hang's: the stall is over
        snapshot.annotations.merge(annotations?.values(for: iteration) ?? [:]) { _, new in new }
        if target.isAlive {
            describeThread(&snapshot, baseline: current?.baseline, now: now, tid: target.tid,
                           end: snapshot.durationExact ? end : nil)
        }
        stallDuration.recordNanoseconds(Int64(clamping: snapshot.durationNanoseconds))
        writer.submit(.finish(snapshot), from: client)
        hangs.ended(id: snapshot.id)
        current = nil
        holders.endStall()
    }

    /// Acts on the hang limits the stall in progress passed: systemd's (while its watchdog is fed) and
    /// `hang_abort_after_ms` (with `hang_action = abort`). Returns when the next pass is due for them.
    private func actOnHang(now: UInt64, target: Target, freezes: FreezeTracker) -> UInt64? {
        guard let stall = current else { return nil }
        let configuration = client.configuration
        let since = stall.snapshot.since
        let frozen = frozenTime(since: since, end: now, now: now, freezes: freezes, tid: target.tid)
        let stalledFor = now &- since &- min(frozen, now &- since)
        var next: UInt64?
        func plan(_ due: UInt64?) {
            if let due { next = next.map { min($0, due) } ?? due }
        }
        if stall.systemdHang != .notYet || systemdIsFed() {
            let limit = configuration.hangs.systemdHangAfter
            let progress = advance(stall.systemdHang, limit: limit, action: "watchdog", stalledFor: stalledFor,
                                   now: now, freezes: freezes, target: target)
            current?.systemdHang = progress.state
            plan(progress.next)
            if progress.state == .actedOn && stall.systemdHang != .actedOn {
                hangs.markHung(id: stall.snapshot.id)
                client.logger.critical("stallmon: a loop hung; systemd's watchdog is no longer fed",
                                       metadata: ["loop": "\(loopName)", "stalledMs": "\(stalledFor / 1_000_000)"])
            }
        }
        if configuration.hangs.action == .abort {
            let progress = advance(stall.abortHang, limit: configuration.hangs.abortAfter, action: "abort",
                                   stalledFor: stalledFor, now: now, freezes: freezes, target: target)
            current?.abortHang = progress.state
            plan(progress.next)
            if progress.state == .actedOn {
                client.logger.critical("stallmon: a loop hung past hang_abort_after_ms; ending the process (SIGABRT)",
                                       metadata: ["loop": "\(loopName)", "stalledMs": "\(stalledFor / 1_000_000)"])
                abort()
            }
        }
        return next
    }

    /// One hang limit at this pass: past it, the hang's report is queued; once it is durable (or the wait for it
    /// timed out), the hang is acted on. Returns the new state and when the next pass is due for it.
    private func advance(_ progress: HangProgress, limit: Duration, action: String, stalledFor: UInt64, now: UInt64,
                         freezes: FreezeTracker, target: Target) -> (state: HangProgress, next: UInt64?) {
        switch progress {
        case .actedOn:
            return (.actedOn, nil)
        case .notYet:
            let limitNanoseconds = UInt64(limit.nanosecondsClamped)
            guard stalledFor >= limitNanoseconds else { return (.notYet, now &+ (limitNanoseconds - stalledFor)) }
            let ticket = writeHang(action: action, limit: limit, now: now, freezes: freezes, target: target)
            let writing = HangProgress.writing(ticket: ticket, deadline: now &+ Self.hangDurabilityTimeout)
            // A writer with nothing else queued may be done already (or none runs): act at once.
            return advance(writing, limit: limit, action: action, stalledFor: stalledFor, now: now,
                           freezes: freezes, target: target)
        case .writing(let ticket, let deadline):
            if let ticket, writer.hasHandled(ticket) { return (.actedOn, nil) }
            guard now >= deadline else { return (progress, min(deadline, now &+ Self.hangDurabilityPoll)) }
            client.logger.error("""
                stallmon: the hang's report could not be made durable (the report writer's queue is full or it is \
                blocked); acting on the hang all the same
                """, metadata: ["loop": "\(loopName)", "action": "\(action)"])
            return (.actedOn, nil)
        }
    }

    /// Queues the stall's report as it stands, marked with what is done about the hang, and its `stall.hang` line
    /// (the writer makes both durable). Returns its ticket (nil: the queue was full). The mark stays on the stall:
    /// its later ongoing reports replace this one on disk, and must not lose it.
    private func writeHang(action: String, limit: Duration, now: UInt64, freezes: FreezeTracker,
                           target: Target) -> UInt64? {
        let afterMs = Double(limit.nanosecondsClamped) / 1e6
        current?.snapshot.hang = StallReport.Hang(action: action, afterMs: afterMs)
        guard let snapshot = ongoingSnapshot(now: now, freezes: freezes, tid: target.tid) else { return nil }
        return writer.submitTracked(.hang(snapshot, action: action, afterMs: afterMs), from: client)
    }

    /// The watchdog stops mid-stall: the evidence is left as an ongoing report, made as an interim one is.
    func stopMidStall(now: UInt64, tid: Int32, freezes: FreezeTracker) {
        guard let snapshot = ongoingSnapshot(now: now, freezes: freezes, tid: tid) else { return }
        hangs.ended(id: snapshot.id)
        writer.submit(.interim(snapshot), from: client)
        current = nil
        holders.endStall()
    }

    /// The stall's report as it stands at `now`, still going on: frozen time (SIGSTOP, a container freeze) set
    /// aside, where the thread's time went, and its hang once it passed a limit. The interim, the hang's and the one
    /// written at stop are all made here: each replaces the one before on disk, so none may leave out what another
    /// said.
    private func ongoingSnapshot(now: UInt64, freezes: FreezeTracker, tid: Int32) -> StallEvidence? {
        guard var snapshot = current?.snapshot else { return nil }
        let elapsed = now &- snapshot.since
        snapshot.ongoing = true
        snapshot.frozenNanoseconds = min(frozenTime(since: snapshot.since, end: now, now: now, freezes: freezes,
                                                    tid: tid), elapsed)
        snapshot.durationNanoseconds = elapsed - snapshot.frozenNanoseconds
        describeThread(&snapshot, baseline: current?.baseline, now: now, tid: tid)
        return snapshot
    }

    private func warnAboutMissingStacks(_ sample: RawSample, tid: Int32) {
        let logger = client.logger
        if sample.handlerReplaced && !warnedAboutReplacedHandler {
            warnedAboutReplacedHandler = true
            logger.error("""
                stallmon: the sampling signal's handler was replaced by someone else; stalls are still \
                timed, but no stack is captured and the signal is never sent
                """, metadata: ["loop": "\(loopName)", "signal": "\(client.configuration.detection.signal)"])
        }
        if sample.status != .ok && !sample.handlerReplaced && !warnedAboutBlockedSignal
            && cstallmon_thread_blocks_signal(tid, cstallmon_installed_signal()) == 1
        {
            warnedAboutBlockedSignal = true
            logger.warning("stallmon: the loop thread blocks the sampling signal; stacks are missing",
                           metadata: ["loop": "\(loopName)", "tid": "\(tid)"])
        }
    }

    /// The frozen time a stall's duration sets aside (finished or ongoing, and for its hang limits): what `freezes`
    /// overlaps, but never more than the stalled thread could have been stopped. A whole-process freeze stops the
    /// thread too, so its CPU time and its wait for a CPU do not grow meanwhile; a thread that ran through a "freeze"
    /// was not frozen: the watchdog took its own late wake-up for one (its CPU taken by the hypervisor, say, while the
    /// stalled thread ran on the other).
    /// From the baseline (when the stall was detected) the thread's own figures bound it; before, the freezes stand.
    private func frozenTime(since: UInt64, end: UInt64, now: UInt64, freezes: FreezeTracker, tid: Int32) -> UInt64 {
        let overlap = freezes.overlap(start: since, end: end)
        guard overlap > 0, let baseline = current?.baseline, now > baseline.at,
              let stats = ThreadStats.read(tid: tid) else { return overlap }
        return Self.frozenTime(
            overlapBeforeBaseline: freezes.overlap(start: since, end: min(end, baseline.at)),
            overlapAfterBaseline: freezes.overlap(start: max(since, baseline.at), end: end),
            window: now - baseline.at, cpu: stats.cpuNanoseconds &- baseline.stats.cpuNanoseconds,
            runDelay: stats.runDelayNanoseconds &- baseline.stats.runDelayNanoseconds)
    }

    /// The decision of `frozenTime`: the overlap after the baseline is at most the part of the baseline's `window`
    /// (to now) in which the thread neither ran (`cpu`) nor waited for a CPU (`runDelay`).
    static func frozenTime(overlapBeforeBaseline: UInt64, overlapAfterBaseline: UInt64, window: UInt64, cpu: UInt64,
                           runDelay: UInt64) -> UInt64 {
        let couldHaveBeenStopped = window - min(window, cpu &+ runDelay)
        return overlapBeforeBaseline + min(overlapAfterBaseline, couldHaveBeenStopped)
    }

    /// Fills in where the thread's time went since the baseline, and the class that follows.
    /// `end` is the thread's own end of the iteration when known: the window stops there. What the thread did after
    /// it, until the watchdog looked (idle in epoll, or already the next iteration when two stalls run back to
    /// back), is not this stall's; its CPU time cannot be told apart in the counters, so CPU and run delay are
    /// capped at the window (an error of at most one watchdog poll).
    private func describeThread(_ snapshot: inout StallEvidence, baseline: Baseline?, now: UInt64, tid: Int32,
                                end: UInt64? = nil) {
        guard let baseline, let stats = ThreadStats.read(tid: tid), now > baseline.at else { return }
        let windowEnd = end.map { min(max($0, baseline.at), now) } ?? now
        var wall = windowEnd - baseline.at
        wall -= min(snapshot.frozenNanoseconds, wall)
        let cpu = min(stats.cpuNanoseconds &- baseline.stats.cpuNanoseconds, wall)
        let delay = min(stats.runDelayNanoseconds &- baseline.stats.runDelayNanoseconds, wall - cpu)
        snapshot.threadFigures = StallReport.ThreadFigures(
            windowMs: Double(wall) / 1e6, cpuMs: Double(cpu) / 1e6, runDelayMs: Double(delay) / 1e6,
            sleepMs: Double(wall - cpu - delay) / 1e6,
            voluntarySwitches: Self.growth(from: baseline.stats.voluntarySwitches, to: stats.voluntarySwitches),
            involuntarySwitches: Self.growth(from: baseline.stats.involuntarySwitches, to: stats.involuntarySwitches))
        snapshot.cpuContention = contentionFigures(since: baseline)
        snapshot.threadClass = StallClassifier.classify(
            cpu: cpu, runDelay: delay, wall: wall,
            throttledWall: CPUContention.throttledWallBound(snapshot.cpuContention))
    }

    /// The CPU limit's throttling and the pressure from the baseline to now, steal and the watchdog's own wait
    /// from the stall's detection. Only on the watchdog thread: a stall finished by `stop()` on another thread (a
    /// loop's, perhaps) gets no figures, rather than that thread's run delay or reads on a loop thread.
    private func contentionFigures(since baseline: Baseline) -> StallReport.CPUContention? {
        guard Watchdog.process.isCurrentThread else { return nil }
        let now = cstallmon_monotonic_ns()
        let ownRunDelay = ThreadStats.ownRunDelay()
        return contention.figures(
            from: baseline.contention, to: contention.read(now: max(now, baseline.at + 1)),
            stealFrom: current?.stealAtDetection, stealTo: contention.readSteal(now: now),
            watchdogRunDelayNanoseconds: ownRunDelay.flatMap { after in
                current?.watchdogRunDelayAtDetection.map { after >= $0 ? after - $0 : 0 }
            })
    }

    /// How much a counter grew, 0 when it went back: /proc's status can fail to be read after schedstat was (the
    /// thread ended, EMFILE: the counts are then 0), or a reused thread id starts counting anew.
    static func growth(from before: UInt64, to after: UInt64) -> Int {
        after >= before ? Int(clamping: after - before) : 0
    }

    private func takeSample(_ capture: (UInt32) -> RawSample, target: Target) -> RawSample {
        let tid = target.tid
        let logger = client.logger
        let holders = holders
        return sampler.sample(tid) { look, sampler in
            if (look.state == "S" || look.state == "D") && look.call == nil {
                Self.reportProcDenied(tid: tid, logger: logger)
            }
            // The holder before the thread's own capture: the thread still waits, so the lock is still held.
            let holder = look.wait?.holderThread.map { holders.sample($0, sampler: &sampler) }
            var sample = capture(target.currentLabel())
            sample.holder = holder
            return sample
        }
    }

    private static let warnedAboutProc = Atomic<Bool>(false)

    /// A sleeping thread whose system call cannot be read: /proc is not mounted, or denied (a hardened container).
    /// Reports then say nothing of what the thread waited on; said once per process.
    private static func reportProcDenied(tid: Int32, logger: Logger) {
        let path = "/proc/self/task/\(tid)/syscall"
        guard access(path, R_OK) != 0 else { return }  // readable: the thread just left its call
        let error = errno
        if error == ENOENT, access("/proc/self/task", F_OK) == 0, access("/proc/self/task/\(tid)", F_OK) != 0 {
            return  // /proc is there; the thread exited
        }
        let reason = String(cString: strerror(error))
        guard !warnedAboutProc.exchange(true, ordering: .relaxed) else { return }
        logger.warning("""
            stallmon: \(path) cannot be read (\(reason)); reports will not say what a blocked loop waited on
            """, metadata: ["tid": "\(tid)"])
    }
}
