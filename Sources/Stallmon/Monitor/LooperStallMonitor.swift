import CStallmonCapture
import CStallmonLoopShims
import Logging
import StallmonLoop
import StallmonReport
import Synchronization

/// Watches one `Looper` for stalls: loop iterations busy for longer than the threshold.
///
/// ```swift
/// let loop = try Looper(name: "main")
/// let monitor = try LooperStallMonitor(loop: loop, configuration: .init(
///     detection: .init(threshold: .milliseconds(100)), reports: .init(directory: "/var/lib/myservice/stalls")))
/// monitor.start()
/// loop.run()
/// ```
///
/// On the loop thread the monitor only stores the busy interval of each iteration into atomics. A watchdog thread
/// notices an iteration crossing the threshold, samples the loop thread's stack by signal while the stall lasts,
/// and a writer thread symbolicates and writes one JSON report per stall plus `stall.begin` / `stall.end` lines to
/// the event log. Failures to write are counted and logged once; they never reach the loop.
///
/// Several loops can be monitored at once, each by its own monitor. All monitors in a process share one sampling
/// signal, and all monitors with the same report directory share one writer thread, symbolicator, event-log writer
/// and each sink instance they were given (see the README's "One process, many loops").
public final class LooperStallMonitor: Sendable {
    /// The loop being watched.
    public let loop: Looper
    /// The validated configuration in effect.
    public let configuration: StallMonitorConfiguration

    private let watch: LoopThreadMonitor
    /// Where written reports go next (StallmonUpload's `UploadSink`, or your own).
    public let sinks: [any StallReportSink]
    private let attached = Atomic<Bool>(false)

    /// Validates `configuration` and takes the sampling signal. Throws when a value is invalid, the signal is
    /// already handled by someone else (the error names it), or the configuration asks for spooling or upload
    /// (`spool`, `upload_endpoint`) and no sink carries it out (pass StallmonUpload's `UploadSink`). `logger`
    /// receives the monitor's own problems (a report directory that cannot be written, a failed capture set-up),
    /// never one line per stall. `sinks` receive every written report on the writer thread, in order.
    public init(loop: Looper, configuration: StallMonitorConfiguration = StallMonitorConfiguration(),
                logger: Logger = Logger(label: "stallmon"),
                sinks: [any StallReportSink] = []) throws(StallMonitorError) {
        watch = try LoopThreadMonitor(name: loop.name, configuration: configuration, logger: logger, sinks: sinks,
                              currentLabel: { loop.currentLabel.id }, currentMode: { loop.currentMode?.name })
        self.sinks = sinks
        self.loop = loop
        self.configuration = configuration
    }

    deinit {
        stop()
    }

    /// Starts watching: creates the report directory (0700) if missing, attaches the probe to the loop (which then
    /// stores each iteration's busy interval into it directly, without an observer call) and starts the watchdog
    /// and writer threads. If the loop is already running, the capture is bound to its thread on the loop's next
    /// pass; otherwise when it starts. Calling it again does nothing; a stopped monitor cannot be restarted (create
    /// a new one).
    public func start() {
        guard watch.start() else { return }
        loop.attach(probe: watch.loopProbe) { [watch] in watch.bindCurrentThread() }
        attached.store(true, ordering: .releasing)
        if watch.isStopped { stop() }  // a concurrent stop() ran before the probe was attached
    }

    /// Stops watching: detaches the probe, joins the watchdog (a stall in progress is written as ongoing; one whose
    /// iteration already ended is finished with its exact end, as usual), waits
    /// until this loop's reports are written, stops the sinks no other monitor still uses with up to 2 s each (the writer is waited for at most 5 s)
    /// (StallmonUpload's `UploadSink` sends what is pending meanwhile; the rest stays in the spool), and returns the
    /// capture slot. Idempotent.
    public func stop() {
        if attached.exchange(false, ordering: .acquiringAndReleasing) {
            loop.detach(probe: watch.loopProbe)
        }
        watch.stop()
    }

    /// Attaches `key = value` to the loop iteration in progress (e.g. a request id); if that iteration stalls, its
    /// report carries them. Call it on the loop thread, from the work being done. Keeps at most 32 keys per
    /// iteration and 256 characters per value. Costs an uncontended lock, only when called.
    public func annotate(_ key: String, _ value: String) {
        watch.annotate(key, value)
    }

    /// Counters since the monitor was created, and the loop's every-iteration figures since it started
    /// (`statistics.loop`).
    public var statistics: StallMonitorStatistics {
        watch.statistics
    }
}
