import Synchronization

/// The thread under a watchdog: named, started once, and stopped at once. Its body loops while `isStopping` is false
/// and sleeps with `wait(until:)` on an eventfd with a nanosecond timeout, which `stop()` cuts short; `stop()` then
/// joins it.
final class StoppableThread: Sendable {
    private let wakeSignal = WakeSignal()
    private let stopping = Atomic<Bool>(false)
    private let thread = Mutex<PosixThread?>(nil)

    /// Why the wake-up signal could not be created (the monitor then refuses to start).
    var creationError: FileError? { wakeSignal.creationError }

    /// True once `stop()` began.
    var isStopping: Bool { stopping.load(ordering: .acquiring) }

    /// Starts `body` on a thread named `name`; false when the system refuses a thread.
    func start(name: String, _ body: @escaping @Sendable () -> Void) -> Bool {
        let started = PosixThread.start(name: name, body)
        thread.withLock { $0 = started }
        return started != nil
    }

    /// Sleeps until `deadline` (CLOCK_MONOTONIC ns) or `stop()`.
    func wait(until deadline: UInt64) {
        wakeSignal.wait(until: deadline)
    }

    /// Wakes the body before its deadline (it goes on running).
    func wake() {
        wakeSignal.wake()
    }

    /// Asks the body to stop and wakes it, without joining it (on the thread itself).
    func requestStop() {
        stopping.store(true, ordering: .releasing)
        wakeSignal.wake()
    }

    /// Asks the body to stop, wakes it and joins it.
    func stop() {
        requestStop()
        let running = thread.withLock { thread in
            defer { thread = nil }
            return thread
        }
        running?.join()
    }
}
