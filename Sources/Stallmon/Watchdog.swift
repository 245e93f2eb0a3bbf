import CStallmonCapture
import CStallmonLoopShims
import Foundation
import Logging
import Metrics
import StallmonLoop
import Synchronization

/// The watchdog thread of one monitor: reads the loop probe, lets `StallDetector` decide, captures samples and
/// hands snapshots to the writer. It sleeps on an eventfd with a nanosecond timeout, so `stop()` is immediate and
/// wake-ups are exactly when the detector asked.
final class Watchdog: Sendable {
    private let probe: LoopProbe
    private let binding: ThreadBinding
    private let loop: Looper
    private let configuration: StallMonitorConfiguration
    private let writer: ReportWriter
    private let counters: MonitorCounters
    private let logger: Logger
    private let stopFD: Int32
    private let stopping = Atomic<Bool>(false)
    private let thread = Mutex<PosixThread?>(nil)
    private let stallCounter: Counter
    private let stallDuration: Metrics.Timer

    init(probe: LoopProbe, binding: ThreadBinding, loop: Looper, configuration: StallMonitorConfiguration,
         writer: ReportWriter, counters: MonitorCounters, logger: Logger) {
        self.probe = probe
        self.binding = binding
        self.loop = loop
        self.configuration = configuration
        self.writer = writer
        self.counters = counters
        self.logger = logger
        stopFD = cstallmon_eventfd_create()
        stallCounter = Counter(label: "stallmon_stalls_total", dimensions: [("loop", loop.name)])
        stallDuration = Metrics.Timer(label: "stallmon_stall_duration", dimensions: [("loop", loop.name)])
    }

    deinit {
        if stopFD >= 0 { close(stopFD) }
    }

    func start() -> Bool {
        let started = PosixThread.start(name: "stallmon-watch") { [self] in run() }
        thread.withLock { $0 = started }
        return started != nil
    }

    func stop() {
        stopping.store(true, ordering: .releasing)
        _ = cstallmon_eventfd_signal(stopFD)
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
    }

    private func run() {
        let detectorConfiguration = StallDetector.Configuration(
            threshold: UInt64(configuration.threshold.nanosecondsClamped),
            sampleInterval: UInt64(configuration.sampleInterval.nanosecondsClamped),
            maxSamples: configuration.maxSamples,
            interimAfter: UInt64(configuration.interimAfter.nanosecondsClamped))
        var detector = StallDetector(configuration: detectorConfiguration)
        var capturer: StackCapturer?
        var boundThread: Int32 = 0
        var current: Current?
        var warnedAboutBlockedSignal = false

        while !stopping.load(ordering: .acquiring) {
            let now = cstallmon_monotonic_ns()
            guard let bound = binding.load() else {
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
            let (actions, wakeAt) = detector.step(reading, now: now)
            for action in actions {
                switch action {
                case .begin(let iteration, let since):
                    _ = iteration
                    counters.stallsDetected.wrappingAdd(1, ordering: .relaxed)
                    stallCounter.increment()
                    let wallNow = cstallmon_realtime_ns()
                    var snapshot = StallSnapshot(
                        id: UUID().uuidString.lowercased(), loopName: loop.name, threadID: boundThread,
                        thresholdNanoseconds: detectorConfiguration.threshold, since: since,
                        sinceWall: wallNow - min(wallNow, now - since), durationNanoseconds: now - since,
                        durationExact: false, ongoing: true, elapsedAtDetection: now - since,
                        labelID: loop.currentLabel.id, samples: [])
                    if let capturer { snapshot.samples.append(takeSample(capturer)) }
                    current = Current(snapshot: snapshot, lastSeenBusy: now)
                    writer.submit(.begin(snapshot))
                case .sample:
                    if let capturer, current != nil {
                        let sample = takeSample(capturer)
                        current?.snapshot.samples.append(sample)
                        if sample.status != .ok && !warnedAboutBlockedSignal
                            && cstallmon_thread_blocks_signal(boundThread, cstallmon_installed_signal()) == 1
                        {
                            warnedAboutBlockedSignal = true
                            logger.warning("stallmon: the loop thread blocks the sampling signal; stacks are missing",
                                           metadata: ["loop": "\(loop.name)", "tid": "\(boundThread)"])
                        }
                    }
                    current?.lastSeenBusy = now
                case .interim:
                    guard var snapshot = current?.snapshot else { break }
                    snapshot.ongoing = true
                    snapshot.durationNanoseconds = now - snapshot.since
                    writer.submit(.interim(snapshot))
                case .finish(let iteration, let since):
                    guard var snapshot = current?.snapshot else { break }
                    if let record = probe.longIterationRecord(iteration), record.begin == since {
                        snapshot.durationNanoseconds = record.end - record.begin
                        snapshot.durationExact = true
                    } else {
                        // The loop overwrote the record (this thread was starved): bound it by what we saw.
                        snapshot.durationNanoseconds = (current?.lastSeenBusy ?? now) - since
                        snapshot.durationExact = false
                    }
                    snapshot.ongoing = false
                    stallDuration.recordNanoseconds(Int64(clamping: snapshot.durationNanoseconds))
                    writer.submit(.finish(snapshot))
                    current = nil
                }
            }
            if case .busy = reading, current != nil { current?.lastSeenBusy = now }
            waitUntil(wakeAt)
        }
        // Stopped mid-stall: leave the evidence as an ongoing report.
        if var snapshot = current?.snapshot {
            snapshot.durationNanoseconds = cstallmon_monotonic_ns() - snapshot.since
            writer.submit(.interim(snapshot))
        }
    }

    private func takeSample(_ capturer: StackCapturer) -> RawSample {
        let sample = capturer.capture(labelID: loop.currentLabel.id)
        switch sample.status {
        case .ok: counters.samplesCaptured.wrappingAdd(1, ordering: .relaxed)
        case .timedOut, .pending: counters.captureTimeouts.wrappingAdd(1, ordering: .relaxed)
        default: break
        }
        return sample
    }

    private func reportThreadBinding(_ bound: ThreadBinding.Bound) {
        if bound.warmUpStatus != .ok {
            logger.warning("stallmon: warming up the capture on the loop thread failed; captures may time out",
                           metadata: ["loop": "\(loop.name)", "status": "\(bound.warmUpStatus.rawValue)"])
        }
        if cstallmon_thread_blocks_signal(bound.tid, cstallmon_installed_signal()) == 1 {
            logger.warning("stallmon: the loop thread blocks the sampling signal; stacks will be missing",
                           metadata: ["loop": "\(loop.name)", "tid": "\(bound.tid)"])
        }
    }

    private func waitUntil(_ deadline: UInt64) {
        let now = cstallmon_monotonic_ns()
        guard deadline > now else { return }
        if cstallmon_wait_readable(stopFD, Int64(clamping: deadline - now)) == 1 {
            _ = cstallmon_eventfd_drain(stopFD)
        }
    }
}

/// Which thread the monitor captures: set once on the loop thread (at `entry`, after warming up the capture) and
/// read by the watchdog. Packed into one atomic: tid, slot and warm-up status.
final class ThreadBinding: Sendable {
    struct Bound: Equatable {
        var tid: Int32
        var slot: Int32
        var warmUpStatus: CaptureStatus
    }

    private let packed = Atomic<UInt64>(0)

    func load() -> Bound? {
        let value = packed.load(ordering: .acquiring)
        guard value != 0 else { return nil }
        let tid = Int32(truncatingIfNeeded: value >> 32)
        let slot = Int32((value >> 8) & 0xFF_FFFF) - 1
        return Bound(tid: tid, slot: slot, warmUpStatus: CaptureStatus(Int32(value & 0xFF)))
    }

    func store(tid: Int32, slot: Int32, warmUpStatus: Int32) {
        let value = UInt64(UInt32(bitPattern: tid)) << 32 | UInt64(UInt32(slot + 1) & 0xFF_FFFF) << 8
            | UInt64(UInt8(truncatingIfNeeded: warmUpStatus))
        packed.store(value, ordering: .releasing)
    }

    func clear() -> Bound? {
        let old = load()
        packed.store(0, ordering: .releasing)
        return old
    }
}
