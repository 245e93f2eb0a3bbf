import CStallmonCapture
import CStallmonLoopShims
import Foundation
import Logging
import Metrics
import StallmonLoop
import StallmonReport
import Synchronization

/// The watchdog thread of one monitor: reads the loop probe, lets `StallDetector` decide, captures samples and
/// hands snapshots to the writer. It sleeps on an eventfd with a nanosecond timeout, so `stop()` is immediate and
/// wake-ups are exactly when the detector asked.
final class Watchdog: Sendable {
    private let probe: LoopProbe
    private let binding: ThreadBinding
    private let loopName: String
    /// The label of what the loop runs now (a `Looper`'s timer, source or block); 0 when the loop has none.
    private let currentLabel: @Sendable () -> UInt32
    /// The run-loop mode the loop runs in now (a `Looper`'s), nil for loops without modes.
    private let currentMode: @Sendable () -> String?
    private let configuration: StallMonitorConfiguration
    private let writer: ReportWriter
    private let client: ReportClient
    private let counters: MonitorCounters
    private let annotations: IterationAnnotations
    private let logger: Logger
    private let stopSignal = WakeSignal()
    /// Why this thread's wake-up signal could not be created (the monitor then refuses to start).
    var setupError: FileError? { stopSignal.creationError }
    private let stopping = Atomic<Bool>(false)
    private let thread = Mutex<PosixThread?>(nil)
    private let stallCounter: Counter
    private let stallDuration: Metrics.Timer

    init(probe: LoopProbe, binding: ThreadBinding, loopName: String, currentLabel: @escaping @Sendable () -> UInt32,
         currentMode: @escaping @Sendable () -> String?, writer: ReportWriter, client: ReportClient,
         annotations: IterationAnnotations) {
        self.probe = probe
        self.annotations = annotations
        self.binding = binding
        self.loopName = loopName
        self.currentLabel = currentLabel
        self.currentMode = currentMode
        self.configuration = client.configuration
        self.writer = writer
        self.client = client
        self.counters = client.counters
        self.logger = client.logger
        stallCounter = Counter(label: "stallmon_stalls_total", dimensions: [("loop", loopName)])
        stallDuration = Metrics.Timer(label: "stallmon_stall_duration", dimensions: [("loop", loopName)])
    }

    func start() -> Bool {
        let started = PosixThread.start(name: "stallmon-watch") { [self] in run() }
        thread.withLock { $0 = started }
        return started != nil
    }

    func stop() {
        stopping.store(true, ordering: .releasing)
        stopSignal.wake()
        let running = thread.withLock { thread in
            defer { thread = nil }
            return thread
        }
        running?.join()
    }

    // MARK: - Watchdog thread

    private struct Current {
        var snapshot: StallSnapshot
        var lastSeenBusy: UInt64
        /// This stall's own baseline: the shared one moves on as soon as the watchdog sees the next iteration busy,
        /// which, for back-to-back stalls, happens before this one is finished.
        var baseline: Baseline?
    }

    /// Scheduler figures of the loop thread when the watchdog first saw an iteration busy.
    private struct Baseline {
        var iteration: UInt64
        var stats: ThreadStats
        var at: UInt64
    }

    private func run() {
        let detectorConfiguration = StallDetector.Configuration(
            threshold: UInt64(configuration.threshold.nanosecondsClamped),
            sampleInterval: UInt64(configuration.sampleInterval.nanosecondsClamped),
            maxSamples: configuration.maxSamples,
            interimAfter: UInt64(configuration.interimAfter.nanosecondsClamped))
        let freezeMinimum = max(10_000_000, detectorConfiguration.threshold / 4)
        var detector = StallDetector(configuration: detectorConfiguration)
        var freezes = FreezeTracker()
        var capturer: StackCapturer?
        var boundThread: Int32 = 0
        var current: Current?
        var baseline: Baseline?
        var warnedAboutBlockedSignal = false
        var warnedAboutReplacedHandler = false
        var expectedWake: UInt64?
        var runDelayBeforeSleep = ThreadStats.ownRunDelay() ?? 0
        var descriptors = DescriptorResolver()
        // A holder's capture waits at most 20 ms: the loop's own sample comes after it, and must not be held up by
        // a holder that is slow to take the signal (a late handler drains its slot as usual).
        let holders = HolderSampler(maxFrames: configuration.maxFrames,
                                    timeout: min(configuration.captureTimeout, .milliseconds(20)),
                                    stacks: configuration.lockHolderStacks)
        defer { holders.endStall() }
        var loopStats = LoopStatsReporter(loopName: loopName, lineInterval: configuration.loopStatsInterval)

        while !stopping.load(ordering: .acquiring) {
            let now = cstallmon_monotonic_ns()
            let delayAtTop = ThreadStats.ownRunDelay()
            var waitedForACapture = false
            if let expected = expectedWake {
                let delayGrowth = (delayAtTop ?? runDelayBeforeSleep) &- runDelayBeforeSleep
                if freezes.observeWake(expected: expected, actual: now, runDelayGrowth: delayGrowth,
                                       minimum: freezeMinimum) {
                    counters.freezes.wrappingAdd(1, ordering: .relaxed)
                    writer.submit(.frozen(loopName: loopName, nanoseconds: now - expected), from: client)
                }
            }
            guard let bound = binding.load() else {
                expectedWake = nil
                waitUntil(now + detectorConfiguration.idlePoll)
                continue
            }
            if capturer?.slot != bound.slot {
                capturer = StackCapturer(slot: bound.slot, maxFrames: configuration.maxFrames,
                                         timeout: configuration.captureTimeout)
                boundThread = bound.tid
                reportThreadBinding(bound)
            }
            let reading = probe.read()
            // The detector sees the iteration as if it began later by the time the whole process was frozen, so a
            // SIGSTOP or VM pause is never mistaken for a stall.
            var adjusted = reading
            if case .busy(let iteration, let since) = reading {
                adjusted = .busy(iteration: iteration, since: since + freezes.overlap(start: since, end: now))
                if baseline?.iteration != iteration, let stats = ThreadStats.read(tid: boundThread) {
                    baseline = Baseline(iteration: iteration, stats: stats, at: now)
                }
            }
            var (actions, wakeAt) = detector.step(adjusted, now: now)
            if loopStats.nextDue.map({ now >= $0 }) ?? true {
                if let line = loopStats.step(now: now, reading: probe.statistics(at: now)) {
                    writer.submit(.loopStats(line, threadID: boundThread), from: client)
                }
            }
            if let due = loopStats.nextDue { wakeAt = min(wakeAt, due) }
            for action in actions {
                switch action {
                case .begin(let iteration, _):
                    guard case .busy(_, let since) = reading else { break }
                    counters.stallsDetected.wrappingAdd(1, ordering: .relaxed)
                    stallCounter.increment()
                    let wallNow = cstallmon_realtime_ns()
                    var snapshot = StallSnapshot(
                        id: UUID().uuidString.lowercased(), loopName: loopName, threadID: boundThread,
                        thresholdNanoseconds: detectorConfiguration.threshold, since: since,
                        sinceWall: wallNow - min(wallNow, now - since), durationNanoseconds: now - since,
                        durationExact: false, ongoing: true, elapsedAtDetection: now - since,
                        labelID: currentLabel(), samples: [])
                    snapshot.annotations = annotations.values(for: iteration)
                    snapshot.mode = currentMode()
                    descriptors = DescriptorResolver()
                    holders.endStall()
                    if let capturer {
                        waitedForACapture = true
                        snapshot.samples.append(takeSample(capturer, tid: boundThread, descriptors: &descriptors,
                                                           holders: holders))
                    }
                    current = Current(snapshot: snapshot, lastSeenBusy: now,
                                      baseline: baseline?.iteration == iteration ? baseline : nil)
                    writer.submit(.begin(snapshot), from: client)
                case .sample:
                    if let capturer, current != nil {
                        waitedForACapture = true
                        let sample = takeSample(capturer, tid: boundThread, descriptors: &descriptors,
                                                holders: holders)
                        current?.snapshot.samples.append(sample)
                        if sample.handlerReplaced && !warnedAboutReplacedHandler {
                            warnedAboutReplacedHandler = true
                            logger.error("""
                                stallmon: the sampling signal's handler was replaced by someone else; stalls are still \
                                timed, but no stack is captured and the signal is never sent
                                """, metadata: ["loop": "\(loopName)", "signal": "\(configuration.signal)"])
                        }
                        if sample.status != .ok && !sample.handlerReplaced && !warnedAboutBlockedSignal
                            && cstallmon_thread_blocks_signal(boundThread, cstallmon_installed_signal()) == 1
                        {
                            warnedAboutBlockedSignal = true
                            logger.warning("stallmon: the loop thread blocks the sampling signal; stacks are missing",
                                           metadata: ["loop": "\(loopName)", "tid": "\(boundThread)"])
                        }
                    }
                    current?.lastSeenBusy = now
                case .interim:
                    guard var snapshot = current?.snapshot else { break }
                    snapshot.ongoing = true
                    snapshot.frozenNanoseconds = freezes.overlap(start: snapshot.since, end: now)
                    snapshot.durationNanoseconds = now - snapshot.since - snapshot.frozenNanoseconds
                    describeThread(&snapshot, baseline: current?.baseline, now: now, tid: boundThread)
                    writer.submit(.interim(snapshot), from: client)
                case .finish(let iteration, _):
                    guard var snapshot = current?.snapshot else { break }
                    var end = current?.lastSeenBusy ?? now
                    if let record = probe.longIterationRecord(iteration) {
                        end = record.end
                        snapshot.durationExact = true
                    } else {
                        snapshot.durationExact = false  // the loop overwrote the record: this thread was starved
                    }
                    snapshot.frozenNanoseconds = freezes.overlap(start: snapshot.since, end: end)
                    snapshot.durationNanoseconds = end - snapshot.since - min(snapshot.frozenNanoseconds,
                                                                              end - snapshot.since)
                    snapshot.ongoing = false
                    snapshot.annotations.merge(annotations.values(for: iteration)) { _, new in new }
                    describeThread(&snapshot, baseline: current?.baseline, now: now, tid: boundThread,
                                   end: snapshot.durationExact ? end : nil)
                    stallDuration.recordNanoseconds(Int64(clamping: snapshot.durationNanoseconds))
                    writer.submit(.finish(snapshot), from: client)
                    current = nil
                    holders.endStall()
                }
            }
            if case .busy = reading, current != nil { current?.lastSeenBusy = now }
            let delayAtEnd = ThreadStats.ownRunDelay() ?? runDelayBeforeSleep
            let passEnd = cstallmon_monotonic_ns()
            // A freeze can also land while this thread works rather than sleeps (more likely on a loaded machine,
            // where it is often preempted mid-pass): the pass then takes as long as the freeze, without waiting for
            // a CPU. A pass that waited for a capture's handler is not judged (that wait is neither).
            if !waitedForACapture, let delayAtTop,
               freezes.observeWake(expected: now, actual: passEnd, runDelayGrowth: delayAtEnd &- delayAtTop,
                                   minimum: freezeMinimum)
            {
                counters.freezes.wrappingAdd(1, ordering: .relaxed)
                writer.submit(.frozen(loopName: loopName, nanoseconds: passEnd - now), from: client)
            }
            runDelayBeforeSleep = delayAtEnd
            expectedWake = max(wakeAt, passEnd)
            waitUntil(wakeAt)
        }
        // Stopped mid-stall: leave the evidence as an ongoing report.
        if var snapshot = current?.snapshot {
            snapshot.durationNanoseconds = cstallmon_monotonic_ns() - snapshot.since
            describeThread(&snapshot, baseline: current?.baseline, now: cstallmon_monotonic_ns(), tid: boundThread)
            writer.submit(.interim(snapshot), from: client)
        }
    }

    /// Fills in where the loop thread's time went since the baseline, and the class that follows.
    /// `end` is the loop's own end of the iteration when known: the window stops there. What the thread did after
    /// it, until the watchdog looked (idle in epoll, or already the next iteration when two stalls run back to
    /// back), is not this stall's; its CPU time cannot be told apart in the counters, so CPU and run delay are
    /// capped at the window (an error of at most one watchdog poll).
    private func describeThread(_ snapshot: inout StallSnapshot, baseline: Baseline?, now: UInt64, tid: Int32,
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
            voluntarySwitches: Int(stats.voluntarySwitches &- baseline.stats.voluntarySwitches),
            involuntarySwitches: Int(stats.involuntarySwitches &- baseline.stats.involuntarySwitches))
        snapshot.threadClass = StallClassifier.classify(cpu: cpu, runDelay: delay, wall: wall)
    }

    private func takeSample(_ capturer: StackCapturer, tid: Int32, descriptors: inout DescriptorResolver,
                            holders: HolderSampler) -> RawSample {
        // Before the signal: in the handler the thread is always R, and no longer in its system call.
        let (state, call, wait) = WaitTarget.current(of: tid, descriptors: &descriptors)
        if (state == "S" || state == "D") && call == nil { Self.reportProcDenied(tid: tid, logger: logger) }
        // The holder before the loop's own capture: the loop still waits, so the lock is still held.
        let holder = wait?.holderThread.map { holders.sample($0, descriptors: &descriptors) }
        var sample = capturer.capture(labelID: currentLabel())
        sample.threadState = state
        sample.wait = wait
        sample.holder = holder
        switch sample.status {
        case .ok: counters.samplesCaptured.wrappingAdd(1, ordering: .relaxed)
        case .timedOut, .pending: counters.captureTimeouts.wrappingAdd(1, ordering: .relaxed)
        default: break
        }
        return sample
    }

    private static let warnedAboutProc = Atomic<Bool>(false)

    /// A sleeping thread whose system call cannot be read: /proc is not mounted, or denied (a hardened container).
    /// Reports then say nothing of what the loop waited on; said once per process.
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

    private func reportThreadBinding(_ bound: ThreadBinding.Bound) {
        if bound.warmUpStatus != .ok {
            logger.warning("stallmon: warming up the capture on the loop thread failed; captures may time out",
                           metadata: ["loop": "\(loopName)", "status": "\(bound.warmUpStatus.rawValue)"])
        }
        if cstallmon_thread_blocks_signal(bound.tid, cstallmon_installed_signal()) == 1 {
            logger.warning("stallmon: the loop thread blocks the sampling signal; stacks will be missing",
                           metadata: ["loop": "\(loopName)", "tid": "\(bound.tid)"])
        }
    }

    private func waitUntil(_ deadline: UInt64) {
        stopSignal.wait(until: deadline)
    }
}
