import CStallmonCapture
import CStallmonLoopShims
import Logging
import StallmonLoop
import StallmonReport
import Synchronization

/// The monitor of one loop thread, whatever kind of loop it is: the probe the loop stores its busy intervals into,
/// the binding to the loop thread, and the watchdog; finished stalls go to the process's shared `ReportPipeline`.
/// `StallMonitor` drives it from a `Looper`'s observers; StallmonNIO from an event loop's selector waits.
package final class LoopWatch: Sendable {
    package let name: String
    package let configuration: StallMonitorConfiguration
    private let probe: LoopProbe
    private let binding = ThreadBinding()
    private let counters = MonitorCounters()
    private let annotations = IterationAnnotations()
    private let client: ReportClient
    private let pipeline: ReportPipeline
    private let watchdog: any WatchdogThread
    private let state = Mutex<(started: Bool, stopped: Bool)>((false, false))
    private let signalHeld = Atomic<Bool>(true)
    /// This watch feeds systemd's watchdog (`SystemdNotifier`) between start and stop.
    private let feedsSystemd = Atomic<Bool>(false)

    /// Validates `configuration`, takes the sampling signal and joins the pipeline of its report directory.
    /// `currentLabel` is read by the watchdog (the loop's label of the work in progress, 0 for none), and so is
    /// `currentMode` (the run-loop mode of the iteration in progress, nil for loops without modes);
    /// `phaseOfReport` names the phase of a finished report (nil: reports have none).
    package convenience init(name: String, configuration: StallMonitorConfiguration, logger: Logger,
                             sinks: [any StallReportSink], currentLabel: @escaping @Sendable () -> UInt32 = { 0 },
                             currentMode: @escaping @Sendable () -> String? = { nil },
                             phaseOfReport: (@Sendable (StallReport) -> String?)? = nil) throws(StallMonitorError) {
        try self.init(name: name, configuration: configuration, logger: logger, sinks: sinks,
                      currentLabel: currentLabel, currentMode: currentMode, phaseOfReport: phaseOfReport,
                      makeWatchdog: nil)
    }

    /// `makeWatchdog` builds a watchdog of another kind than a loop's (the global executor's workers), from the
    /// monitor's client and the pipeline's writer; nil: the loop's own `Watchdog` over this watch's probe.
    init(name: String, configuration: StallMonitorConfiguration, logger: Logger,
         sinks: [any StallReportSink], currentLabel: @escaping @Sendable () -> UInt32 = { 0 },
         currentMode: @escaping @Sendable () -> String? = { nil },
         phaseOfReport: (@Sendable (StallReport) -> String?)? = nil,
         makeWatchdog: ((ReportClient, ReportWriter) -> any WatchdogThread)?) throws(StallMonitorError) {
        try Self.check(configuration, sinks: sinks)
        let signalNumber: Int32
        do {
            signalNumber = try configuration.signal.resolve()
        } catch {
            throw StallMonitorError(description: error.description)
        }
        var message = [CChar](repeating: 0, count: 512)
        guard cstallmon_install(signalNumber, &message, message.count) == 0 else {
            let text = String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            throw StallMonitorError(description: "cannot take the sampling signal: \(text)")
        }
        self.name = name
        self.configuration = configuration
        probe = LoopProbe(thresholdNanoseconds: UInt64(configuration.threshold.nanosecondsClamped))
        client = ReportClient(configuration: configuration, logger: logger, counters: counters, loopName: name,
                              sinks: sinks, phaseOfReport: phaseOfReport)
        do {
            pipeline = try ReportPipeline.join(client)
        } catch {
            cstallmon_release()
            throw StallMonitorError(
                description: "cannot create the monitor's wake-up eventfd (report writer): \(error)")
        }
        watchdog = makeWatchdog?(client, pipeline.writer)
            ?? Watchdog(probe: probe, binding: binding, loopName: name, currentLabel: currentLabel,
                        currentMode: currentMode, writer: pipeline.writer, client: client, annotations: annotations)
        if let failure = watchdog.setupError {
            pipeline.leave(client, sinksStarted: false, sinkDeadline: .zero)
            cstallmon_release()
            signalHeld.store(false, ordering: .relaxed)
            throw StallMonitorError(description: "cannot create the monitor's wake-up eventfd: \(failure)")
        }
    }

    deinit {
        stop()
    }

    /// Throws when `configuration` is invalid or asks for spooling or upload that none of `sinks` carries out.
    /// `init` runs it first; a monitor of several loops runs it once before setting any loop up.
    package static func check(_ configuration: StallMonitorConfiguration,
                              sinks: [any StallReportSink]) throws(StallMonitorError) {
        do {
            try configuration.validate()
        } catch {
            throw StallMonitorError(description: error.description)
        }
        // An existing directory another user could steer is refused now, before anything starts; one created later
        // is checked again before every write.
        do {
            try DirectoryTrust.verifyIfPresent(configuration.reportDirectory)
            try DirectoryTrust.verifyIfPresent(AtomicFile.parentDirectory(of: configuration.resolvedEventLogPath))
        } catch {
            throw StallMonitorError(description: "stallmon: \(error)")
        }
        if configuration.upload.spoolEnabled && !sinks.contains(where: \.handlesUploadConfiguration) {
            throw StallMonitorError(description: "the configuration asks for "
                + (configuration.upload.endpoint != nil ? "upload (upload_endpoint)" : "spooling (spool = on)")
                + " but no sink carries it out: link the StallmonUpload product and pass "
                + "`sinks: [try UploadSink(configuration: configuration, logger: logger)]`")
        }
    }

    /// The probe the loop thread stores its busy intervals into.
    package var loopProbe: LoopProbe { probe }

    /// Starts the sinks not yet started and the watchdog thread. Returns false when it was already started or
    /// stopped. Logs (once) when the watchdog thread cannot be created.
    @discardableResult
    package func start() -> Bool {
        let shouldStart = state.withLock { state in
            guard !state.started, !state.stopped else { return false }
            state.started = true
            return true
        }
        guard shouldStart else { return false }
        // The directory exists from the start, so `stallmon report DIR` says "No stalls recorded" for a service that
        // never stalled rather than "no such directory". A failure is not logged here: every write retries it, and
        // the writer logs it once, with the reports it drops.
        try? AtomicFile.createDirectory(configuration.reportDirectory)
        probe.monitoringSince.store(cstallmon_monotonic_ns(), ordering: .releasing)
        pipeline.startSinks(of: client)
        pipeline.startControlSocket(for: client)
        feedsSystemd.store(SystemdNotifier.shared.retain(configuration, logger: client.logger), ordering: .relaxed)
        if !watchdog.start() {
            client.logger.error("stallmon: cannot start the watchdog thread; stalls will not be detected",
                                metadata: ["loop": "\(name)"])
        }
        return true
    }

    /// Joins the watchdog (a stall in progress is written as ongoing), waits until the pipeline wrote this loop's
    /// reports, stops the sinks no other monitor uses (up to 2 s each; the writer is waited for at most 5 s) and returns the capture slot. Idempotent.
    package func stop() {
        let started: Bool? = state.withLock { state in
            guard !state.stopped else { return nil }
            state.stopped = true
            return state.started
        }
        guard let started else { return }
        watchdog.stop()
        if feedsSystemd.exchange(false, ordering: .relaxed) { SystemdNotifier.shared.release() }
        pipeline.leave(client, sinksStarted: started, sinkDeadline: .seconds(2))
        // Closed for good: a bind already running on the loop thread either lands before this and its slot is
        // released here, or sees the binding closed and releases its own.
        if let bound = binding.close(), bound.slot >= 0 { cstallmon_slot_release(bound.slot) }
        if signalHeld.exchange(false, ordering: .relaxed) { cstallmon_release() }
    }

    /// On the loop thread: reserve a capture slot for this thread and warm libunwind up with one capture of itself,
    /// so the first real capture does not pay for lazy initialisation. Cheap when already bound to this thread.
    package func bindCurrentThread() {
        let tid = cstallmon_gettid()
        if let bound = binding.load(), bound.tid == tid { return }
        let slot = cstallmon_slot_acquire(tid)
        let status = slot >= 0 ? cstallmon_warm_up(slot) : Int32(CSTALLMON_CAPTURE_NOT_READY.rawValue)
        let (accepted, previous) = binding.replace(tid: tid, slot: slot, warmUpStatus: Int32(status))
        if !accepted {
            if slot >= 0 { cstallmon_slot_release(slot) }  // the monitor stopped while we bound
        } else if let previous, previous.slot >= 0 {
            cstallmon_slot_release(previous.slot)
        }
    }

    /// True once `stop()` began.
    package var isStopped: Bool { state.withLock { $0.stopped } }

    /// The kernel thread id the capture is bound to, once the loop thread bound itself.
    package var boundThreadID: Int32? { binding.load()?.tid }

    /// See `StallMonitor.annotate`.
    package func annotate(_ key: String, _ value: String) {
        annotations.set(key, value, iteration: probe.currentIteration())
    }

    package var statistics: StallMonitorStatistics {
        var statistics = counters.snapshot(longIterations: Int(probe.longIterationCount.load(ordering: .relaxed)))
        statistics.loop = probe.statistics(at: cstallmon_monotonic_ns())
        return statistics
    }
}
