import CStallmonCapture
import CStallmonLoopShims
import Logging
import StallmonLoop
import StallmonReport
import Synchronization

/// Why a monitor could not be created.
public struct StallMonitorError: Error, CustomStringConvertible, Sendable {
    public let description: String
}

/// Watches one `Looper` for stalls: loop iterations busy for longer than the threshold.
///
/// ```swift
/// let loop = try Looper(name: "main")
/// let monitor = try StallMonitor(loop: loop, configuration: .init(threshold: .milliseconds(100),
///                                                               reportDirectory: "/var/lib/myservice/stalls"))
/// monitor.start()
/// loop.run()
/// ```
///
/// On the loop thread the monitor only stores the busy interval of each iteration into atomics. A watchdog thread
/// notices an iteration crossing the threshold, samples the loop thread's stack by signal while the stall lasts,
/// and a writer thread symbolicates and writes one JSON report per stall plus `stall.begin` / `stall.end` lines to
/// the event log. Failures to write are counted and logged once; they never reach the loop.
///
/// Several loops can be monitored at once, each by its own monitor; all monitors in a process share one sampling
/// signal.
public final class StallMonitor: Sendable {
    /// The loop being watched.
    public let loop: Looper
    /// The validated configuration in effect.
    public let configuration: StallMonitorConfiguration

    private let logger: Logger
    private let probe: LoopProbe
    private let binding = ThreadBinding()
    private let counters = MonitorCounters()
    private let annotations = IterationAnnotations()
    private let writer: ReportWriter
    private let watchdog: Watchdog
    /// Where written reports go next (StallmonUpload's `UploadSink`, or your own).
    public let sinks: [any StallReportSink]
    private let state = Mutex<LifeCycle>(LifeCycle())
    private let signalHeld = Atomic<Bool>(true)

    private struct LifeCycle {
        var started = false
        var stopped = false
        var observerToken: LooperObserverToken?
    }

    /// Validates `configuration` and takes the sampling signal. Throws when a value is invalid, the signal is
    /// already handled by someone else (the error names it), or the configuration asks for spooling or upload
    /// (`spool`, `upload_endpoint`) and no sink carries it out (pass StallmonUpload's `UploadSink`). `logger`
    /// receives the monitor's own problems (a report directory that cannot be written, a failed capture set-up),
    /// never one line per stall. `sinks` receive every written report on the writer thread, in order.
    public init(loop: Looper, configuration: StallMonitorConfiguration = StallMonitorConfiguration(),
                logger: Logger = Logger(label: "stallmon"),
                sinks: [any StallReportSink] = []) throws(StallMonitorError) {
        do {
            try configuration.validate()
        } catch {
            throw StallMonitorError(description: error.description)
        }
        if configuration.upload.spoolEnabled && !sinks.contains(where: \.handlesUploadConfiguration) {
            throw StallMonitorError(description: "the configuration asks for "
                + (configuration.upload.endpoint != nil ? "upload (upload_endpoint)" : "spooling (spool = on)")
                + " but no sink carries it out: link the StallmonUpload product and pass "
                + "`sinks: [try UploadSink(configuration: configuration, logger: logger)]`")
        }
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
        self.sinks = sinks
        self.loop = loop
        self.configuration = configuration
        self.logger = logger
        probe = LoopProbe(thresholdNanoseconds: UInt64(configuration.threshold.nanosecondsClamped))
        writer = ReportWriter(configuration: configuration, logger: logger, counters: counters, loopName: loop.name,
                              sinks: sinks)
        watchdog = Watchdog(probe: probe, binding: binding, loop: loop, configuration: configuration,
                            writer: writer, counters: counters, annotations: annotations, logger: logger)
        if let failure = watchdog.setupError ?? writer.setupError {
            cstallmon_release()
            signalHeld.store(false, ordering: .relaxed)
            throw StallMonitorError(description: "cannot create the monitor's wake-up eventfd: \(failure)")
        }
    }

    deinit {
        stop()
    }

    /// Starts watching: creates the report directory (0700) if missing, registers the loop observers and starts the
    /// watchdog and writer threads. If the loop is
    /// already running, the capture is bound to its thread on the loop's next pass; otherwise at `entry`.
    /// Calling it again does nothing; a stopped monitor cannot be restarted (create a new one).
    public func start() {
        let shouldStart = state.withLock { state in
            guard !state.started, !state.stopped else { return false }
            state.started = true
            return true
        }
        guard shouldStart else { return }
        let probe = probe
        let token = loop.addObserver(
            for: [.entry, .afterWaiting, .beforeTimers, .beforeWaiting, .exit], order: Int.min
        ) { [binding] activity, now in
            // Compare raw bits: this runs on the loop thread several times per iteration.
            switch activity.rawValue {
            case LooperActivity.beforeTimers.rawValue: probe.passBegins(at: now.nanoseconds)
            case LooperActivity.beforeWaiting.rawValue: probe.loopIdles(at: now.nanoseconds)
            case LooperActivity.afterWaiting.rawValue: probe.loopWoke(at: now.nanoseconds)
            case LooperActivity.entry.rawValue: StallMonitor.bindCurrentThread(binding)
            default: probe.loopIdles(at: now.nanoseconds)  // exit
            }
        }
        state.withLock { $0.observerToken = token }
        if loop.isRunning {
            loop.perform(label: "stallmon.bind") { [binding] in StallMonitor.bindCurrentThread(binding) }
        }
        // The directory exists from the start, so `stallmon report DIR` says "No stalls recorded" for a service that
        // never stalled rather than "no such directory". A failure is not logged here: every write retries it, and
        // the writer logs it once, with the reports it drops.
        try? AtomicFile.createDirectory(configuration.reportDirectory)
        for sink in sinks { sink.start() }
        writer.start()
        if !watchdog.start() {
            logger.error("stallmon: cannot start the watchdog thread; stalls will not be detected",
                         metadata: ["loop": "\(loop.name)"])
        }
    }

    /// Stops watching: removes the observers, joins the watchdog (a stall in progress is written as ongoing) and
    /// the writer (queued reports are written first), stops the sinks with up to 2 s each (StallmonUpload's
    /// `UploadSink` sends what is pending meanwhile; the rest stays in the spool), and returns the capture slot.
    /// Idempotent.
    public func stop() {
        let token: LooperObserverToken?? = state.withLock { state in
            guard !state.stopped else { return nil }
            state.stopped = true
            return .some(state.observerToken)
        }
        guard let token else { return }
        if let token { loop.removeObserver(token) }
        watchdog.stop()
        writer.stop()
        for sink in sinks { sink.stop(deadline: .seconds(2)) }  // e.g. one last flush of what was just spooled
        // Closed for good: a bind already running on the loop thread (entry, or the posted stallmon.bind) either
        // lands before this and its slot is released here, or sees the binding closed and releases its own.
        if let bound = binding.close(), bound.slot >= 0 { cstallmon_slot_release(bound.slot) }
        if signalHeld.exchange(false, ordering: .relaxed) { cstallmon_release() }
    }

    /// Attaches `key = value` to the loop iteration in progress (e.g. a request id); if that iteration stalls, its
    /// report carries them. Call it on the loop thread, from the work being done. Keeps at most 32 keys per
    /// iteration and 256 characters per value. Costs an uncontended lock, only when called.
    public func annotate(_ key: String, _ value: String) {
        annotations.set(key, value, iteration: probe.currentIteration())
    }

    /// Counters since the monitor was created.
    public var statistics: StallMonitorStatistics {
        counters.snapshot(longIterations: Int(probe.longIterationCount.load(ordering: .relaxed)))
    }

    /// On the loop thread, once per `run`: reserve a capture slot for this thread and warm libunwind up with one
    /// capture of itself, so the first real capture does not pay for lazy initialisation.
    private static func bindCurrentThread(_ binding: ThreadBinding) {
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
}
