import CStallmonLoopShims
import Dispatch
#if canImport(Glibc)
import Glibc
#endif

/// A plain joinable pthread. The watchdog and the writer use these rather than Dispatch or Swift concurrency,
/// whose shared pools may themselves be starved when the process is in trouble.
package final class PosixThread: @unchecked Sendable {
    // @unchecked: `handle` is written once in `start` before the thread is visible to anyone else.
    private var handle = pthread_t()
    /// Signalled when the body returned, for `join(timeout:)`.
    private let finished = DispatchSemaphore(value: 0)

    private final class Box {
        let name: String
        let body: @Sendable () -> Void
        let finished: DispatchSemaphore
        init(name: String, body: @escaping @Sendable () -> Void, finished: DispatchSemaphore) {
            self.name = name
            self.body = body
            self.finished = finished
        }
    }

    /// Starts `body` on a new thread named `name` (first 15 bytes). Returns nil when the system refuses a thread.
    package static func start(name: String, _ body: @escaping @Sendable () -> Void) -> PosixThread? {
        let thread = PosixThread()
        let box = Unmanaged.passRetained(Box(name: name, body: body, finished: thread.finished))
        let rc = pthread_create(&thread.handle, nil, { raw in
            let box = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
            cstallmon_set_thread_name(box.name)
            box.body()
            box.finished.signal()
            return nil
        }, box.toOpaque())
        guard rc == 0 else {
            box.release()
            return nil
        }
        return thread
    }

    /// Waits for the thread to finish.
    package func join() {
        pthread_join(handle, nil)
    }

    /// Waits at most `timeout` for the thread to finish: true and joined if it did; false if not, and the thread is
    /// detached (it ends on its own whenever its body returns). Call once, instead of `join()`.
    package func join(timeout: Duration) -> Bool {
        let nanoseconds = max(0, timeout.nanosecondsClamped)  // saturated: a huge timeout is "forever", not a trap
        guard finished.wait(timeout: .now() + .nanoseconds(Int(nanoseconds))) == .success else {
            pthread_detach(handle)
            return false
        }
        pthread_join(handle, nil)
        return true
    }

    /// Lets the thread end on its own, never joined. Call once, instead of `join()`.
    package func detach() {
        pthread_detach(handle)
    }
}
