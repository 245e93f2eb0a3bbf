#ifndef C_STALLMON_LOOP_SHIMS_H
#define C_STALLMON_LOOP_SHIMS_H

// Syscalls the run loop needs that Swift's Glibc module does not export (sys/epoll.h, sys/eventfd.h are not in
// its module map), plus gettid.
// None of these are called from a signal handler; async-signal-safety is noted anyway for callers who might.

#include <stdint.h>
#include <sys/types.h>
// The clock and the histogram (CStallmonMeasure), re-exported: a Swift module that imports the shims reads the clock.
#include "CStallmonMeasure.h"

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
/// Uses epoll_pwait2 for nanosecond timeouts and falls back to epoll_pwait (timeout rounded up to a millisecond)
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

/// The loop running on the calling thread (an opaque, unretained `Looper`), or NULL. A `__thread` variable, which
/// Swift cannot declare. Async-signal-safe (a thread-local read or write).
void *cstallmon_loop_current(void);
void cstallmon_loop_set_current(void *loop);

/// The inode's generation number (FS_IOC_GETVERSION: ext4, XFS and btrfs set a new one each time an inode number is
/// reused; tmpfs and overlayfs answer ENOTTY), for the spool's "still the same file" checks; an ioctl, variadic in C, so Swift cannot call it.
/// Returns 0 and stores it, or -1 with errno (ENOTTY: this file system has none; ENOSYS: a seccomp filter forbids the
/// ioctl). NOT async-signal-safe (may run the system-call probe first).
int cstallmon_file_generation(int fd, uint32_t *generation);

/// rename(2) that never replaces an existing `to` (renameat2 with RENAME_NOREPLACE): putting a spool entry back must
/// not overwrite a newer one enqueued meanwhile. Returns 0, or -1 with errno (EEXIST: `to` exists; EINVAL or ENOSYS:
/// this file system, kernel or a seccomp filter cannot, and nothing was renamed). NOT async-signal-safe (may run the
/// system-call probe first).
int cstallmon_rename_noreplace(const char *from, const char *to);

// MARK: - What a seccomp filter lets this process do

/// The system calls stallmon makes that a hardened unit may filter: systemd's `@system-service` set leaves out
/// process_vm_readv (it is in `@debug`), and older systemd versions and container profiles lack the newer ones.
enum {
    CSTALLMON_SYSCALL_PROCESS_VM_READV,
    CSTALLMON_SYSCALL_EPOLL_PWAIT2,
    CSTALLMON_SYSCALL_RENAMEAT2,
    CSTALLMON_SYSCALL_TGKILL,
    CSTALLMON_SYSCALL_GETRUSAGE,
    CSTALLMON_SYSCALL_IOCTL,
    CSTALLMON_SYSCALL_COUNT
};

/// A probe's verdict on one system call.
enum {
    /// Not probed yet, or the probe could not tell (no child could be made, no answer within 2 s): not made.
    CSTALLMON_SYSCALL_UNKNOWN = 0,
    CSTALLMON_SYSCALL_ALLOWED = 1,
    /// The filter answers an error (EPERM, EACCES, ENOSYS: the detail), or the kernel lacks it.
    CSTALLMON_SYSCALL_REFUSED = 2,
    /// The filter kills the caller (the detail is the signal, SIGSYS).
    CSTALLMON_SYSCALL_KILLED = 3,
};

/// Probes every system call above whose verdict is not known yet: with no seccomp filter (`Seccomp:` 0 in
/// /proc/self/status) all are allowed; with one, each is made in a child process the filter may kill instead of this
/// one (not dumping core). The mode is read again at each call: a filter installed since makes every verdict stale. An
/// unknown verdict (no child could be made, no answer within 2 s) is probed again, at most once a second. NOT
/// async-signal-safe (clone, pipe, waitpid, a mutex); a few ms per call probed, with a filter.
void cstallmon_syscalls_probe(void);

/// 1 when system call `which` is known to be allowed, else 0 (before its probe too). Async-signal-safe (an atomic
/// load).
int cstallmon_syscall_allowed(int which);

/// The verdict on `which` (probing it first if need be), its errno or signal in `detail`. NOT async-signal-safe.
int cstallmon_syscall_verdict(int which, int *detail);

/// The system call's name. Async-signal-safe.
const char *cstallmon_syscall_name(int which);

/// This process's seccomp mode (0 none, 1 strict, 2 filter; -1 unread). NOT async-signal-safe.
int cstallmon_seccomp_mode(void);

/// 1 when this process's own memory can be read without faulting: process_vm_readv is allowed, or (where a filter
/// forbids it) /proc/self/mem was opened instead. Async-signal-safe (atomic loads).
int cstallmon_own_memory_readable(void);

struct iovec;
/// process_vm_readv on this process when the probe allowed it; else the same reads with pread on /proc/self/mem
/// (opened by the probe; segments paired one to one), else -1 with errno EPERM. Every read of this process's own
/// memory that must not fault goes through it. Async-signal-safe (atomic loads, system calls).
long cstallmon_vm_readv(const struct iovec *local, unsigned long local_count, const struct iovec *remote,
                        unsigned long remote_count);

#ifdef __cplusplus
}
#endif
#endif
