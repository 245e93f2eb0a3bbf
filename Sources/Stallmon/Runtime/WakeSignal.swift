import CStallmonLoopShims
#if canImport(Glibc)
import Glibc
#endif

/// What the watchdog, writer and uploader threads sleep on: an eventfd, so that `wake()` from any thread ends a
/// `wait` at once, with a nanosecond deadline on CLOCK_MONOTONIC (ppoll).
package final class WakeSignal: Sendable {
    private let fd = cstallmon_eventfd_create()

    package init() {}

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
        var timeout: Int64 = -1
        if let deadline {
            let now = cstallmon_loop_monotonic_ns()
            guard deadline > now else { return }
            timeout = Int64(clamping: deadline - now)
        }
        if cstallmon_wait_readable(fd, timeout) == 1 { _ = cstallmon_eventfd_drain(fd) }
    }
}
