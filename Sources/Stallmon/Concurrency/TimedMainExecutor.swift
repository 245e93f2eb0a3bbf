@_spi(ExperimentalCustomExecutors) import _Concurrency
import CStallmonConcurrency

/// The main actor's executor, timed: jobs go to the main queue exactly as the platform's main executor sends them
/// (`dispatch_async_f` on the main queue; they run on whichever thread drains it, on Linux a libdispatch worker
/// after `dispatch_main()`), and the worker's probe is stamped before and after each.
///
/// Why this way: since Swift 6.2 the main executor is Swift code that enqueues on the main queue directly, so
/// `swift_task_enqueueMainExecutor_hook` sees almost no main-actor job (measured with 6.3.1: none of a program's
/// `MainActor.run` hops). The runtime's executor factory (`_createExecutors(factory:)`, SPI
/// `ExperimentalCustomExecutors`) is the one way in: it replaces the main actor's executor with this one, which
/// delegates everything but `enqueue` to the platform's own (run loop, `checkIsolated`).
final class TimedMainExecutor: MainExecutor, @unchecked Sendable {
    private let platform: any MainExecutor

    init(platform: any MainExecutor) {
        self.platform = platform
    }

    func run() throws {
        try platform.run()
    }

    func stop() {
        platform.stop()
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let unowned = UnownedJob(job)
        cstallmon_concurrency_enqueue_main(unsafeBitCast(unowned, to: UnsafeMutableRawPointer.self))
    }

    func checkIsolated() {
        platform.checkIsolated()
    }

    var isMainExecutor: Bool { true }
}

/// The factory `_createExecutors` installs: the timed main executor, and the platform's default executor unchanged
/// (the global executor's jobs are timed through the enqueue hooks instead, which also see jobs that bypass it).
enum TimedExecutorFactory: ExecutorFactory {
    nonisolated(unsafe) static var timedMainExecutor: TimedMainExecutor?

    static var mainExecutor: any MainExecutor {
        timedMainExecutor ?? PlatformExecutorFactory.mainExecutor
    }

    static var defaultExecutor: any TaskExecutor {
        PlatformExecutorFactory.defaultExecutor
    }

    /// Why the main actor cannot be timed, or nil once it is (idempotent).
    static func install() -> String? {
        if timedMainExecutor != nil { return nil }
        let current = MainActor.executor
        guard (current as AnyObject) === (PlatformExecutorFactory.mainExecutor as AnyObject) else {
            return "the main actor already has a custom executor (\(type(of: current))); its jobs are not timed"
        }
        timedMainExecutor = TimedMainExecutor(platform: current)
        _createExecutors(factory: TimedExecutorFactory.self)
        return nil
    }
}
