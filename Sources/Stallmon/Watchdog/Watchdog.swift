import CStallmonCapture
import CStallmonLoopShims
import Foundation
import Logging
import Metrics
import StallmonLoop
import StallmonReport
import Synchronization

/// A monitor's watchdog thread, as `LoopWatch` starts and stops it.
protocol WatchdogThread: Sendable {
    /// The thread `run` runs on.
    var runner: StoppableThread { get }
    /// The thread's name (`stallmon-watch`, `stallmon-pool`).
    var threadName: String { get }
    /// The thread's body: passes until `runner.isStopping`; a stall in progress is then written as ongoing.
    func run()
}

extension WatchdogThread {
    /// Why its wake-up signal could not be created (the monitor then refuses to start).
    var setupError: FileError? { runner.creationError }

    /// Starts the thread; false when it could not be created.
    func start() -> Bool {
        runner.start(name: threadName) { [self] in run() }
    }

    /// Stops and joins it.
    func stop() {
        runner.stop()
    }
}

/// The watchdog thread of one monitor: reads the loop probe, lets `StallDetector` decide, captures samples and
/// hands snapshots to the writer. It sleeps on an eventfd with a nanosecond timeout, so `stop()` is immediate and
/// wake-ups are exactly when the detector asked.
final class Watchdog: WatchdogThread {
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
    let runner = StoppableThread()
    let threadName = "stallmon-watch"
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

    // MARK: - Watchdog thread

    func run() {
        let detectorConfiguration = StallTracker.detectorConfiguration(configuration)
        var freezeWatch = FreezeWatch(thresholdNanoseconds: detectorConfiguration.threshold)
        var capturer: StackCapturer?
        var boundThread: Int32 = 0
        let tracker = StallTracker(loopName: loopName, client: client, writer: writer, annotations: annotations,
                                   stallCounter: stallCounter, stallDuration: stallDuration)
        var loopStats = LoopStatsReporter(loopName: loopName, lineInterval: configuration.loopStatsInterval)
        let probe = probe
        let snapshots = SnapshotCoordinator.shared
        var answeredSnapshot: UInt64 = 0
        snapshots.join(ObjectIdentifier(self), runner: runner)
        defer { snapshots.leave(ObjectIdentifier(self)) }

        while !runner.isStopping {
            let now = cstallmon_monotonic_ns()
            if let frozen = freezeWatch.passBegins(now: now) { reportFreeze(frozen) }
            // Whether this pass waits on work of its own (a capture, the writer): then its length is not a freeze.
            var waitedOnItsOwnWork = false
            if let request = snapshots.pending(after: answeredSnapshot) {
                // A snapshot on demand: what the loop does now, and its stack (also when idle: the loop thread
                // retries the interrupted epoll_wait, as any signal makes it).
                answeredSnapshot = request
                var part = SnapshotCoordinator.Part(name: loopName, kind: "loop", tid: boundThread == 0 ? nil : boundThread)
                if case .busy(_, let since) = probe.read() { part.busySince = since }
                part.labelID = currentLabel()
                part.sample = capturer?.capture(labelID: part.labelID)
                // Up to capture_timeout_ms when the loop thread blocks the signal.
                waitedOnItsOwnWork = part.sample != nil
                snapshots.contribute(ObjectIdentifier(self), generation: request, parts: [part])
            }
            guard let bound = binding.load() else {
                freezeWatch.skipNextWake()
                runner.wait(until: now + detectorConfiguration.idlePoll)
                continue
            }
            if capturer?.slot != bound.slot {
                capturer = StackCapturer(slot: bound.slot, maxFrames: configuration.maxFrames,
                                         timeout: configuration.captureTimeout)
                boundThread = bound.tid
                reportThreadBinding(bound)
            }
            let reading = probe.read()
            let target = StallTracker.Target(
                tid: boundThread, capture: capturer.map { capturer in { capturer.capture(labelID: $0) } },
                longIterationRecord: { probe.longIterationRecord($0) }, currentLabel: currentLabel,
                currentMode: currentMode)
            let tracked = tracker.step(reading, now: now, target: target, freezes: freezeWatch.freezes)
            var wakeAt = tracked.wakeAt
            waitedOnItsOwnWork = waitedOnItsOwnWork || tracked.waitedOnItsOwnWork
            if loopStats.nextDue.map({ now >= $0 }) ?? true {
                if let line = loopStats.step(now: now, reading: probe.statistics(at: now)) {
                    writer.submit(.loopStats(line, threadID: boundThread), from: client)
                }
            }
            if let due = loopStats.nextDue { wakeAt = min(wakeAt, due) }
            if let frozen = freezeWatch.passEnds(began: now, waitedOnItsOwnWork: waitedOnItsOwnWork, wakeAt: wakeAt) {
                reportFreeze(frozen)
            }
            runner.wait(until: wakeAt)
        }
        // Stopped mid-stall: leave the evidence as an ongoing report.
        tracker.stopMidStall(now: cstallmon_monotonic_ns(), tid: boundThread, freezes: freezeWatch.freezes)
    }

    private func reportFreeze(_ nanoseconds: UInt64) {
        counters.freezes.wrappingAdd(1, ordering: .relaxed)
        writer.submit(.frozen(loopName: loopName, nanoseconds: nanoseconds), from: client)
    }

    private func reportThreadBinding(_ bound: ThreadBinding.Bound) {
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
