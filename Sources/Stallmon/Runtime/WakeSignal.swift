import CStallmonLoopShims
#if canImport(Glibc)
import Glibc
#endif

/// What the watchdog, writer and uploader threads sleep on: an eventfd, so that `wake()` from any thread ends a
/// `wait` at once, with a nanosecond deadline on CLOCK_MONOTONIC (ppoll).
///
/// When the system refuses an eventfd (descriptors exhausted), `creationError` says why and waits degrade to sleeps
/// of at most 10 ms, so a wait without a deadline can never hang; the monitor refuses to start in that case.
package final class WakeSignal: Sendable {
    private let fd: Int32
    /// Why the eventfd could not be created, or nil.
    package let creationError: FileError?

    package init() {
        fd = cstallmon_eventfd_create()
        creationError = fd < 0 ? FileError.last("eventfd", "(wake-up signal)") : nil
    }

    deinit {
        if fd >= 0 { close(fd) }
    }

    /// Ends the current or next `wait` early. Safe from any thread.
    package func wake() {
        _ = cstallmon_eventfd_signal(fd)
    }

    /// Sleeps until `deadline` (CLOCK_MONOTONIC ns; nil: until woken) or a `wake()`, which it consumes. May return
    /// early on EINTR; callers re-check their state and clock.
    package func wait(until deadline: UInt64?) {
        var remaining: UInt64?  // nil: no deadline
        if let deadline {
            let now = cstallmon_monotonic_ns()
            guard deadline > now else { return }
            remaining = deadline - now
        }
        guard fd >= 0 else {
            var pause = timespec(tv_sec: 0, tv_nsec: Int(min(10_000_000, remaining ?? 10_000_000)))
            _ = nanosleep(&pause, nil)
            return
        }
        if cstallmon_wait_readable(fd, remaining.map { Int64(clamping: $0) } ?? -1) == 1 {
            _ = cstallmon_eventfd_drain(fd)
        }
    }
}
