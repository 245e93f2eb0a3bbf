#ifndef C_STALLMON_LOOP_SHIMS_H
#define C_STALLMON_LOOP_SHIMS_H

// Syscalls the run loop needs that Swift's Glibc module does not export (sys/epoll.h, sys/eventfd.h are not in
// its module map), plus gettid and a CLOCK_MONOTONIC read that Swift can inline as a plain call.
// None of these are called from a signal handler; async-signal-safety is noted anyway for callers who might.

#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Readiness bits, mirrored from <sys/epoll.h> so Swift need not see that header.
enum {
    CSTALLMON_EPOLLIN = 0x001,
    CSTALLMON_EPOLLOUT = 0x004,
    CSTALLMON_EPOLLERR = 0x008,
    CSTALLMON_EPOLLHUP = 0x010,
    CSTALLMON_EPOLLRDHUP = 0x2000,
};

/// One ready descriptor: the user token registered with it and the readiness bits.
typedef struct {
    uint64_t token;
    uint32_t events;
} cstallmon_ready_event;

/// epoll_create1(EPOLL_CLOEXEC). Returns the fd or -1 with errno. Async-signal-safe (a syscall).
int cstallmon_epoll_create(void);

/// epoll_ctl ADD/MOD/DEL with `token` as the event's data. Returns 0 or -1 with errno. Async-signal-safe.
int cstallmon_epoll_add(int epfd, int fd, uint32_t events, uint64_t token);
int cstallmon_epoll_modify(int epfd, int fd, uint32_t events, uint64_t token);
int cstallmon_epoll_remove(int epfd, int fd);

/// Waits for at most `max_events` ready descriptors, at most `timeout_ns` nanoseconds (negative: forever, 0: poll).
/// Uses epoll_pwait2 for nanosecond timeouts and falls back to epoll_wait (timeout rounded up to a millisecond)
/// on kernels without it. Returns the count, or -1 with errno; EINTR is returned to the caller, who retries.
/// Async-signal-safe (syscalls only) but pointless in a handler.
int cstallmon_epoll_wait(int epfd, cstallmon_ready_event *events, int max_events, int64_t timeout_ns);

/// eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK). Async-signal-safe.
int cstallmon_eventfd_create(void);
/// Adds 1 to the eventfd counter; EAGAIN (counter saturated) counts as success. Retries EINTR. Async-signal-safe.
int cstallmon_eventfd_signal(int fd);
/// Reads and resets the counter; returns 0 when it was already zero. Retries EINTR. Async-signal-safe.
int cstallmon_eventfd_drain(int fd);

/// Waits until `fd` is readable or `timeout_ns` (negative: forever) elapses, with ppoll's nanosecond timeout.
/// Returns 1 when readable, 0 on timeout or EINTR (the caller re-checks its clock), -1 on error.
/// Async-signal-safe.
int cstallmon_wait_readable(int fd, int64_t timeout_ns);

/// Blocks `signals` (`count` of them) in the calling thread (threads it creates later inherit that) and returns a
/// non-blocking, close-on-exec signalfd that becomes readable when one of them is pending for the process; -1 with
/// errno. Async-signal-safe (system calls only) but meant for start-up.
int cstallmon_signalfd_open(const int *signals, int count);

/// Takes one pending signal from a signalfd: its number, 0 when none is pending, -1 with errno on error.
/// Async-signal-safe (one read).
int cstallmon_signalfd_take(int fd);

/// Names the calling thread (at most 15 bytes are kept). NOT async-signal-safe.
void cstallmon_set_thread_name(const char *name);

/// The kernel thread id of the caller: the one every stallmon module uses. Async-signal-safe.
pid_t cstallmon_gettid(void);

/// CLOCK_MONOTONIC in nanoseconds (vDSO, no syscall): the one clock every stallmon module reads from Swift (the
/// signal handler's own reads in CStallmonCapture are of the same clock). Async-signal-safe.
uint64_t cstallmon_monotonic_ns(void);

/// The loop running on the calling thread (an opaque, unretained `Looper`), or NULL. A `__thread` variable, which
/// Swift cannot declare. Async-signal-safe (a thread-local read or write).
void *cstallmon_loop_current(void);
void cstallmon_loop_set_current(void *loop);

// MARK: - Busy-time histogram (log-linear buckets, one writer)

/// Log-linear buckets: values below 32 ns have a bucket each; above, every power of two is split into 16 equal
/// buckets, so a bucket is at most 1/16 of its lower bound wide and its midpoint within 3.2 % of any value in it.
/// The last bucket holds everything from 2^36 ns (68.7 s) up.
enum {
    CSTALLMON_HISTOGRAM_SUB_BITS = 4,
    CSTALLMON_HISTOGRAM_LINEAR = 32,
    CSTALLMON_HISTOGRAM_MAX_EXPONENT = 36,
    CSTALLMON_HISTOGRAM_BUCKETS = 32 + (36 - 5) * 16 + 1,
};

/// The bucket of `nanoseconds`. Async-signal-safe (arithmetic only).
static inline uint32_t cstallmon_histogram_bucket(uint64_t nanoseconds) {
    if (nanoseconds < CSTALLMON_HISTOGRAM_LINEAR) return (uint32_t)nanoseconds;
    uint32_t exponent = 63u - (uint32_t)__builtin_clzll(nanoseconds);
    if (exponent >= CSTALLMON_HISTOGRAM_MAX_EXPONENT) return CSTALLMON_HISTOGRAM_BUCKETS - 1;
    uint32_t mantissa = (uint32_t)(nanoseconds >> (exponent - CSTALLMON_HISTOGRAM_SUB_BITS)) & 15u;
    return CSTALLMON_HISTOGRAM_LINEAR + (exponent - 5u) * 16u + mantissa;
}

/// Counts one value. Only one thread may record into `buckets` (the loop thread), so a relaxed load and store
/// replace a locked read-modify-write; readers on other threads see each count whole (aligned 64-bit accesses).
/// Async-signal-safe.
static inline void cstallmon_histogram_record(uint64_t *buckets, uint64_t nanoseconds) {
    uint64_t *bucket = buckets + cstallmon_histogram_bucket(nanoseconds);
    __atomic_store_n(bucket, __atomic_load_n(bucket, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
}

/// Reads one bucket's count from any thread. Async-signal-safe.
static inline uint64_t cstallmon_histogram_count(const uint64_t *buckets, uint32_t index) {
    return __atomic_load_n(buckets + index, __ATOMIC_RELAXED);
}

#ifdef __cplusplus
}
#endif
#endif
