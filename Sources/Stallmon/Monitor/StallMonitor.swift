import CStallmonCapture
import CStallmonLoopShims
import Logging
import StallmonLoop
import StallmonReport
import Synchronization

/// Why a monitor could not be created.
public struct StallMonitorError: Error, CustomStringConvertible, Sendable {
    public let description: String

    package init(description: String) {
        self.description = description
    }
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
/// Several loops can be monitored at once, each by its own monitor. All monitors in a process share one sampling
/// signal, and all monitors with the same report directory share one writer thread, symbolicator, event-log writer
/// and each sink instance they were given (see the README's "One process, many loops").
public final class StallMonitor: Sendable {
    /// The loop being watched.
    public let loop: Looper
    /// The validated configuration in effect.
    public let configuration: StallMonitorConfiguration

    private let watch: LoopWatch
    /// Where written reports go next (StallmonUpload's `UploadSink`, or your own).
    public let sinks: [any StallReportSink]
    private let observerToken = Mutex<LooperObserverToken?>(nil)

    /// Validates `configuration` and takes the sampling signal. Throws when a value is invalid, the signal is
    /// already handled by someone else (the error names it), or the configuration asks for spooling or upload
    /// (`spool`, `upload_endpoint`) and no sink carries it out (pass StallmonUpload's `UploadSink`). `logger`
    /// receives the monitor's own problems (a report directory that cannot be written, a failed capture set-up),
    /// never one line per stall. `sinks` receive every written report on the writer thread, in order.
    public init(loop: Looper, configuration: StallMonitorConfiguration = StallMonitorConfiguration(),
                logger: Logger = Logger(label: "stallmon"),
                sinks: [any StallReportSink] = []) throws(StallMonitorError) {
        watch = try LoopWatch(name: loop.name, configuration: configuration, logger: logger, sinks: sinks,
                              currentLabel: { loop.currentLabel.id })
        self.sinks = sinks
        self.loop = loop
        self.configuration = configuration
    }

    deinit {
        stop()
    }

    /// Starts watching: creates the report directory (0700) if missing, registers the loop observers and starts the
    /// watchdog and writer threads. If the loop is
    /// already running, the capture is bound to its thread on the loop's next pass; otherwise at `entry`.
    /// Calling it again does nothing; a stopped monitor cannot be restarted (create a new one).
    public func start() {
        guard watch.start() else { return }
        let probe = watch.loopProbe
        let token = loop.addObserver(
            for: [.entry, .afterWaiting, .beforeTimers, .beforeWaiting, .exit], order: Int.min
        ) { [watch] activity, now in
            // Compare raw bits: this runs on the loop thread several times per iteration.
            switch activity.rawValue {
            case LooperActivity.beforeTimers.rawValue: probe.passBegins(at: now.nanoseconds)
            case LooperActivity.beforeWaiting.rawValue: probe.loopIdles(at: now.nanoseconds)
            case LooperActivity.afterWaiting.rawValue: probe.loopWoke(at: now.nanoseconds)
            case LooperActivity.entry.rawValue: watch.bindCurrentThread()
            default: probe.loopIdles(at: now.nanoseconds)  // exit
            }
        }
        observerToken.withLock { $0 = token }
        if watch.isStopped { stop() }  // a concurrent stop() ran before the token was stored
        if loop.isRunning {
            loop.perform(label: "stallmon.bind") { [watch] in watch.bindCurrentThread() }
        }
    }

    /// Stops watching: removes the observers, joins the watchdog (a stall in progress is written as ongoing), waits
    /// until this loop's reports are written, stops the sinks no other monitor still uses with up to 2 s each
    /// (StallmonUpload's `UploadSink` sends what is pending meanwhile; the rest stays in the spool), and returns the
    /// capture slot. Idempotent.
    public func stop() {
        if let token = observerToken.withLock({ token in
            defer { token = nil }
            return token
        }) {
            loop.removeObserver(token)
        }
        watch.stop()
    }

    /// Attaches `key = value` to the loop iteration in progress (e.g. a request id); if that iteration stalls, its
    /// report carries them. Call it on the loop thread, from the work being done. Keeps at most 32 keys per
    /// iteration and 256 characters per value. Costs an uncontended lock, only when called.
    public func annotate(_ key: String, _ value: String) {
        watch.annotate(key, value)
    }

    /// Counters since the monitor was created.
    public var statistics: StallMonitorStatistics {
        watch.statistics
    }
}
