import CStallmonCapture
import CStallmonLoopShims
import Logging
import Metrics
import StallmonLoop
import StallmonReport
import Synchronization

/// The probe source of one loop thread (a `Looper`, a SwiftNIO event loop): the `LoopProbe` the loop stores its busy
/// intervals into, and the capture slot the loop thread bound itself to (`ThreadBinding`), read by the watchdog;
/// one `StallTracker` decides, samples and reports.
final class LoopThreadSource: ProbeSource {
    private let probe: LoopProbe
    private let binding: ThreadBinding
    private let loopName: String
    /// The label of what the loop runs now (a `Looper`'s timer, source or block); 0 when the loop has none.
    private let currentLabel: @Sendable () -> UInt32
    /// The run-loop mode the loop runs in now (a `Looper`'s), nil for loops without modes.
    private let currentMode: @Sendable () -> String?
    /// What this kind of loop adds to each stall's report (StallmonNIO: the tick's phase).
    private let sections: [any StallSection]
    private let configuration: StallMonitorConfiguration
    private let writer: ReportWriter
    private let client: PipelineMember
    private let tracker: StallTracker
    /// Made on the watchdog thread at its first pass, as its metrics are: swift-metrics binds a metric to the
    /// factory bootstrapped when it is made, and a service may bootstrap it after creating the monitor.
    private var loopStats: LoopStatsReporter?
    /// The CPU limit's throttling over the same windows as the `loop.stats` lines.
    private var throttlingWindow = CPUContention.ThrottlingWindow()
    private var capturer: StackCapturer?
    private var boundThread: Int32 = 0
    /// The bound thread's pthread_self() (recorded when it warmed up; 0 until then): where its active task is.
    private var loopThread: UInt = 0
    /// How often an unbound loop thread is looked for.
    private let idlePoll: UInt64

    init(probe: LoopProbe, binding: ThreadBinding, loopName: String, currentLabel: @escaping @Sendable () -> UInt32,
         currentMode: @escaping @Sendable () -> String?, sections: [any StallSection],
         annotations: IterationAnnotations,
         collaborators: StallTracker.Collaborators) {
        self.probe = probe
        self.binding = binding
        self.loopName = loopName
        self.currentLabel = currentLabel
        self.currentMode = currentMode
        self.sections = sections
        client = collaborators.client
        writer = collaborators.writer
        configuration = client.configuration
        idlePoll = StallTracker.detectorConfiguration(configuration).idlePoll
        tracker = StallTracker(loopName: loopName, annotations: annotations, collaborators: collaborators)
    }

    /// What the loop does now and its stack (also when idle: the loop thread retries the interrupted epoll_wait,
    /// as any signal makes it). The capture waits up to capture_timeout_ms when the loop thread blocks the signal.
    func snapshotParts() -> (parts: [SnapshotCoordinator.Part], waitedOnItsOwnWork: Bool) {
        var part = SnapshotCoordinator.Part(name: loopName, kind: "loop", tid: boundThread == 0 ? nil : boundThread)
        if case .busy(_, let since) = probe.read() { part.busySince = since }
        part.labelID = currentLabel()
        part.sample = capturer.map {
            Self.capture(with: $0, labelID: part.labelID, probe: probe, loopThread: loopThread)
        }
        return ([part], part.sample != nil)
    }

    func pass(now: UInt64, freezes: FreezeTracker) -> ProbePass {
        guard let bound = binding.load() else { return ProbePass(wakeAt: now + idlePoll, watchedNothing: true) }
        if capturer?.slot != bound.slot {
            capturer = StackCapturer(slot: bound.slot, maxFrames: configuration.detection.maxFrames,
                                     timeout: configuration.detection.captureTimeout)
            boundThread = bound.tid
            reportThreadBinding(bound)
        }
        // Each pass: a binding replaced by another of the same slot (A, B, then A again) leaves the index alone.
        loopThread = cstallmon_slot_thread(bound.slot)
        let reading = probe.read()
        if let wake = tracker.idleWake(reading, now: now) { return ProbePass(wakeAt: wake) }
        let tracked = tracker.step(reading, now: now, target: target(), freezes: freezes)
        return ProbePass(wakeAt: tracked.wakeAt, waitedOnItsOwnWork: tracked.waitedOnItsOwnWork)
    }

    /// What the tracker reads of the loop thread besides its probe.
    private func target() -> StallTracker.Target {
        let probe = probe
        return StallTracker.Target(
            tid: boundThread,
            capture: capturer.map { capturer in
                { [loopThread] in Self.capture(with: capturer, labelID: $0, probe: probe, loopThread: loopThread) }
            },
            longIterationRecord: { probe.longIterationRecord($0) }, currentLabel: currentLabel,
            labelOfIteration: { [currentLabel] iteration in
                // Read before the probe: still busy in the same iteration afterwards, the label was its work's.
                let label = currentLabel()
                atomicMemoryFence(ordering: .acquiring)  // the label's load before the probe's
                guard case .busy(iteration, _) = probe.read() else { return nil }
                return label
            },
            currentMode: currentMode, describe: { [sections] in $0.sections += sections })
    }

    /// One sample, with the await chain of the task the loop ran (async code its executor runs), kept only if the
    /// loop was still in the same iteration after the chain was read: the task could otherwise have suspended and
    /// run again meanwhile.
    private static func capture(with capturer: StackCapturer, labelID: UInt32, probe: LoopProbe,
                                loopThread: UInt) -> RawSample {
        let before = probe.read()
        var sample = capturer.capture(labelID: labelID, loopThread: loopThread)
        var sameIteration = false
        if case .busy = before { sameIteration = probe.read() == before }
        if !sameIteration { sample.awaitChain = nil }
        return sample
    }

    var statisticsDue: UInt64? { loopStats?.nextDue ?? 0 }

    func exportStatistics(now: UInt64) {
        if loopStats == nil { _ = throttlingWindow.close(Watchdog.process.cpuContention) }  // opens its window
        var reporter = loopStats
            ?? LoopStatsReporter(loopName: loopName, lineInterval: configuration.analysis.loopStatsInterval)
        defer { loopStats = reporter }
        if var line = reporter.step(now: now, reading: probe.statistics(at: now)) {
            line.throttling = throttlingWindow.close(Watchdog.process.cpuContention)
            writer.submit(.loopStats(line, threadID: boundThread), from: client)
        }
    }

    /// Stopping: a stall whose iteration has already ended (stop() often comes right after the work that stalled,
    /// before the watchdog's next pass saw it end) is finished as usual, with its exact end; one still going on is
    /// left as an ongoing report. There is no grace to wait for an end: the monitor detached the probe already, so
    /// an iteration ending now is no longer recorded.
    func stop(freezes: FreezeTracker) {
        if tracker.isStalled {
            let reading = probe.read()
            let stillRunning = if case .busy(let iteration, _) = reading {
                tracker.isTracking(iteration: iteration)
            } else {
                false
            }
            if !stillRunning {
                // Seen as idle whatever runs now: stopping finishes a stall, it never begins one (a next iteration
                // already past the threshold would be sampled through a slot that may be released by now).
                _ = tracker.step(.idle(completedIterations: 0), now: cstallmon_monotonic_ns(), target: target(),
                                 freezes: freezes)
            }
        }
        tracker.stopMidStall(now: cstallmon_monotonic_ns(), tid: boundThread, freezes: freezes)
    }

    private func reportThreadBinding(_ bound: ThreadBinding.Bound) {
        let logger = client.logger
        if bound.slot < 0 {
            let inUse = cstallmon_slots_in_use()
            logger.warning("""
                stallmon: no capture slot for the loop thread (\(inUse) in use of \(CSTALLMON_MAX_SLOTS), or no \
                memory for more): its stalls are reported without stacks
                """,
                           metadata: ["loop": "\(loopName)", "tid": "\(bound.tid)"])
        } else if bound.warmUpStatus != .ok {
            logger.warning("stallmon: warming up the capture on the loop thread failed; captures may time out",
                           metadata: ["loop": "\(loopName)", "status": "\(bound.warmUpStatus.rawValue)"])
        }
        if cstallmon_thread_blocks_signal(bound.tid, cstallmon_installed_signal()) == 1 {
            logger.warning("stallmon: the loop thread blocks the sampling signal; stacks will be missing",
                           metadata: ["loop": "\(loopName)", "tid": "\(bound.tid)"])
        }
    }
}
