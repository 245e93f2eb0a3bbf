#if canImport(Glibc)
import Glibc
#endif

/// A mutex and condition variable whose timed waits run on CLOCK_MONOTONIC. Foundation's `NSCondition` waits on the
/// wall clock (CLOCK_REALTIME): a clock stepped back (NTP, an operator) while it waits extends the wait by the step,
/// so a "bounded" stop could wait an hour. For the waits `stop()` and snapshots bound.
package final class MonotonicCondition: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>

    package init() {
        mutex = .allocate(capacity: 1)
        condition = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    package func lock() { pthread_mutex_lock(mutex) }
    package func unlock() { pthread_mutex_unlock(mutex) }
    package func broadcast() { pthread_cond_broadcast(condition) }

    /// Waits (the lock held) until broadcast or `deadline` (CLOCK_MONOTONIC ns). False when the deadline passed.
    @discardableResult
    package func wait(until deadline: UInt64) -> Bool {
        var time = timespec(tv_sec: Int(clamping: deadline / 1_000_000_000),
                            tv_nsec: Int(deadline % 1_000_000_000))
        return pthread_cond_timedwait(condition, mutex, &time) != ETIMEDOUT
    }
}
