import CStallmonLoopShims
#if canImport(Glibc)
import Glibc
#endif

/// A plain joinable pthread. The watchdog and the writer use these rather than Dispatch or Swift concurrency,
/// whose shared pools may themselves be starved when the process is in trouble.
package final class PosixThread: @unchecked Sendable {
    // @unchecked: `handle` is written once in `start` before the thread is visible to anyone else.
    private var handle = pthread_t()

    private final class Box {
        let name: String
        let body: @Sendable () -> Void
        init(name: String, body: @escaping @Sendable () -> Void) {
            self.name = name
            self.body = body
        }
    }

    /// Starts `body` on a new thread named `name` (first 15 bytes). Returns nil when the system refuses a thread.
    package static func start(name: String, _ body: @escaping @Sendable () -> Void) -> PosixThread? {
        let thread = PosixThread()
        let box = Unmanaged.passRetained(Box(name: name, body: body))
        let rc = pthread_create(&thread.handle, nil, { raw in
            let box = Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue()
            cstallmon_set_thread_name(box.name)
            box.body()
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
}
