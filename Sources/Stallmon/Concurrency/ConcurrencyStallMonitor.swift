import CStallmonCapture
import CStallmonConcurrency
import Logging
import StallmonReport
import Synchronization

/// Watches Swift Concurrency's global executor for stalls: jobs (an `async` function's run between two suspension
/// points, a task group's child, an actor's work) that hold a worker thread for longer than the threshold.
///
/// On Linux the global executor is a pool of one thread per core: a handler that blocks in it (a synchronous read,
/// a mutex, a CPU-heavy encode, `usleep`) takes a whole worker away. This is where Hummingbird 2 route handlers,
/// Vapor 4 `async` routes, gRPC-swift 2 handlers and every actor without a custom executor run.
///
/// ```swift
/// @main struct Service {
///     static func main() async throws {
///         let monitor = try ConcurrencyStallMonitor(configuration: .init(detection: .init(threshold: .milliseconds(100))))
///         monitor.start()
///         defer { monitor.stop() }
///         try await runTheService()
///     }
/// }
/// ```
///
/// Creating the monitor installs the runtime's global-enqueue hooks (`swift_task_enqueueGlobal_hook` and its
/// `WithDelay`/`WithDeadline` siblings) and from then on runs every job the way the runtime's own executor does (the
/// same per-priority dispatch queues, as wide as the machine has CPUs), stamping the worker's probe before and after
/// it: two clock reads and a few stores per job. Create it first thing in `main`, before tasks run: jobs enqueued
/// before it run untimed, and the main actor's executor may only be replaced while no other thread uses it (created
/// later, pass `mainActor: false`). The hooks stay installed for the life of the process (jobs keep running on the same queues after
/// `stop()`, timed by nobody); one monitor at a time per process, and a later one after `stop()` takes over.
///
/// A stall report is what a loop's stall gets (samples for as long as it lasts, class, what it waited on, a lock
/// holder's stack, signature, rate limit, events), with `loop` the pool's name, `thread` the worker, and `job` the
/// job's priority, task id and kind.
public final class ConcurrencyStallMonitor: Sendable {
    /// The name reports give the pool (`loop`).
    public let name: String
    /// The validated configuration in effect.
    public let configuration: StallMonitorConfiguration
    /// Where written reports go next (StallmonUpload's `UploadSink`, or your own).
    public let sinks: [any StallReportSink]
    private let core: MonitorCore
    private let owner = Atomic<Bool>(true)
    /// Whether the main actor's jobs are timed (see `init`'s `mainActor`).
    public let mainActorTimed: Bool

    /// One live monitor per process: the hooks feed a single set of worker probes.
    private static let live = Atomic<Bool>(false)

    /// Validates `configuration`, takes the sampling signal and installs the global executor's hooks. Throws when a
    /// value is invalid, the signal is taken, another `ConcurrencyStallMonitor` is live, or another party already
    /// owns the global executor's hooks (SwiftNIO's executor take-over: the jobs then run on NIO's event loops,
    /// which `NIOStallMonitor` watches).
    ///
    /// `mainActor`: also time the main actor's jobs (reports with `loop` = `mainActorName`, `job.executor` =
    /// `main`), by giving the main actor a timed executor through the runtime's executor factory (see the README on
    /// how stable that is). Skipped, with a warning logged, when the main actor already has a custom executor.
    public init(name: String = "swift-global-executor",
                configuration: StallMonitorConfiguration = StallMonitorConfiguration(),
                logger: Logger = Logger(label: "stallmon"),
                sinks: [any StallReportSink] = [],
                mainActor: Bool = true, mainActorName: String = "main-actor") throws(StallMonitorError) {
        guard !Self.live.exchange(true, ordering: .acquiringAndReleasing) else {
            throw StallMonitorError(description: """
                stallmon: another ConcurrencyStallMonitor is watching this process's global executor; stop it first
                """)
        }
        do throws(StallMonitorError) {
            // The core first: it checks the configuration and takes the sampling signal (or says who has it) before
            // the hooks are set to it.
            let created = try MonitorCore(name: name, configuration: configuration, logger: logger, sinks: sinks) {
                PoolWorkerSource(poolName: name, mainActorName: mainActorName, collaborators: $0)
            }
            do throws(StallMonitorError) {
                cstallmon_concurrency_set_statistics(configuration.analysis.poolStatistics ? 1 : 0)
                try Self.installHooks(signal: created.signalNumber, threshold: configuration.detection.threshold)
            } catch {
                created.stop()
                throw error
            }
            core = created
        } catch {
            Self.live.store(false, ordering: .releasing)
            throw error
        }
        if mainActor, let reason = TimedExecutorFactory.install() {
            logger.warning("stallmon: \(reason)")
        }
        mainActorTimed = mainActor && TimedExecutorFactory.timedMainExecutor != nil
        // Each check reads the runtime's memory with process_vm_readv: where a seccomp filter forbids it, the checks
        // would only fail and blame the runtime's layout; the filter's own line (at the core's start) says why.
        if SystemCallFilter.allowsOwnMemoryReads {
            Self.checkTaskNameLayout(logger: logger)
            AwaitChain.checkLayout(logger: logger)
            StallLabel.checkLayout(logger: logger)
        }
        self.name = name
        self.configuration = configuration
        self.sinks = sinks
    }

    deinit {
        stop()
    }

    private static func installHooks(signal: Int32, threshold: Duration) throws(StallMonitorError) {
        let thresholdNanoseconds = UInt64(threshold.nanosecondsClamped)
        switch cstallmon_concurrency_install(signal, thresholdNanoseconds) {
        case CSTALLMON_CONCURRENCY_INSTALLED:
            return
        case CSTALLMON_CONCURRENCY_ALREADY:
            cstallmon_concurrency_configure(signal, thresholdNanoseconds)  // a monitor after a stopped one
        case CSTALLMON_CONCURRENCY_HOOK_TAKEN:
            throw StallMonitorError(description: """
                stallmon: Swift Concurrency's global executor hook (swift_task_enqueueGlobal_hook) is already taken, \
                by SwiftNIO's executor take-over (NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAs\
                ConcurrencyGlobalExecutor) or another library; its jobs run where that owner runs them. For NIO's \
                take-over they run on NIO's event loops: watch those with NIOStallMonitor
                """)
        default:
            throw StallMonitorError(description: """
                stallmon: this process's Swift runtime has no global executor hooks \
                (swift_task_enqueueGlobal_hook); async code cannot be watched
                """)
        }
    }

    private static let taskNameLayoutChecked = Atomic<Bool>(false)

    /// Task names (`Task(name:)`) are read from where the runtime keeps them, which is no public interface: once per
    /// process, a task with a known name reads its own name that way, and names are read only if it comes out right.
    private static func checkTaskNameLayout(logger: Logger) {
        guard !taskNameLayoutChecked.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let expected = "stallmon task-name check"
        Task.detached(name: expected, priority: .background) {
            let verdict: Int32? = withUnsafeCurrentTask { task in
                guard let task, let name = Task.name else { return nil }
                let pointer = unsafeBitCast(task, to: UInt.self)
                return name.withCString { cstallmon_concurrency_check_task_names(pointer, $0) }
            }
            if verdict != 1 {
                logger.notice("""
                    stallmon: task names are not read on this Swift runtime (a task's name is not where this build                     looks for it); async stall reports give the task id only
                    """)
            }
        }
    }

    /// Starts watching: creates the report directory (0700) if missing, starts the watchdog and writer threads.
    /// Calling it again does nothing; a stopped monitor cannot be restarted (create a new one).
    public func start() {
        core.start()
    }

    /// Stops watching: joins the watchdog (a stall in progress is written as ongoing), waits until the pool's
    /// reports are written, stops the sinks no other monitor still uses (up to 2 s each; the writer is waited for at most 5 s). Jobs keep running on the
    /// same queues. Idempotent. Blocks: from async code, call it off the cooperative pool (`StallMonitorService`
    /// does).
    public func stop() {
        core.stop()
        if owner.exchange(false, ordering: .acquiringAndReleasing) {
            Self.live.store(false, ordering: .releasing)
        }
    }

    /// Counters since the monitor was created (stalls, reports, samples, …). `loop` is empty: a pool has no
    /// iterations of its own.
    public var statistics: StallMonitorStatistics {
        core.counters.snapshot(longIterations: 0)
    }

    /// Jobs run through the hooks so far, by every worker (whether or not a monitor was running then).
    public static var jobsTimed: UInt64 {
        cstallmon_concurrency_jobs()
    }
}
