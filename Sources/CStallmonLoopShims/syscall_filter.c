// Which system calls a seccomp filter lets this process make (systemd's SystemCallFilter=, a container runtime's
// profile). A filter's action is per system call and may be SECCOMP_RET_KILL_PROCESS: the only safe test is to make
// the call in a child, which the filter kills instead of us. See the header.
#ifndef _GNU_SOURCE
#error You must define _GNU_SOURCE (Package.swift does)
#endif
#include "CStallmonLoopShims.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static struct {
    pthread_mutex_t lock;
    int seccomp_mode;
    _Atomic int verdicts[CSTALLMON_SYSCALL_COUNT];
    int details[CSTALLMON_SYSCALL_COUNT];
    // When an unknown verdict may be probed again (CLOCK_MONOTONIC s): a failure to probe (EMFILE, EAGAIN) is not
    // kept for the life of the process, nor retried at every call.
    time_t retry_at[CSTALLMON_SYSCALL_COUNT];
    // /proc/self/mem, opened when process_vm_readv is not allowed: pread on it reads this process's memory without
    // faulting too (EIO where nothing is mapped). -1: not open.
    _Atomic int mem_fd;
} g_filter = {.lock = PTHREAD_MUTEX_INITIALIZER, .seccomp_mode = -2, .mem_fd = -1};

static const char *const g_names[CSTALLMON_SYSCALL_COUNT] = {
    [CSTALLMON_SYSCALL_PROCESS_VM_READV] = "process_vm_readv",
    [CSTALLMON_SYSCALL_EPOLL_PWAIT2] = "epoll_pwait2",
    [CSTALLMON_SYSCALL_RENAMEAT2] = "renameat2",
    [CSTALLMON_SYSCALL_TGKILL] = "tgkill",
    [CSTALLMON_SYSCALL_GETRUSAGE] = "getrusage",
    [CSTALLMON_SYSCALL_IOCTL] = "ioctl",
};

// NOT async-signal-safe (open, read). The `Seccomp:` line of /proc/self/status: 0 none, 1 strict, 2 filter; -1 unread.
static int read_seccomp_mode(void) {
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char buffer[8192];
    size_t used = 0;
    for (;;) {
        ssize_t got = read(fd, buffer + used, sizeof buffer - 1 - used);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        used += (size_t)got;
        if (used == sizeof buffer - 1) break;
    }
    close(fd);
    buffer[used] = 0;
    const char *line = strstr(buffer, "\nSeccomp:");
    if (line == NULL) return -1;
    line += strlen("\nSeccomp:");
    while (*line == ' ' || *line == '\t') line++;
    return (*line >= '0' && *line <= '9') ? *line - '0' : -1;
}

// Runs in the child only: raw system calls, nothing else. Makes system call `which` with harmless arguments and
// returns its errno (0: it succeeded, or failed in a way that shows the kernel ran it).
static int try_call(int which, int scratch_fd) {
    long result = 0;
    switch (which) {
    case CSTALLMON_SYSCALL_PROCESS_VM_READV: {
        uint64_t source = 42, target = 0;
        struct iovec local = {.iov_base = &target, .iov_len = sizeof target};
        struct iovec remote = {.iov_base = &source, .iov_len = sizeof source};
        result = syscall(SYS_process_vm_readv, (long)syscall(SYS_getpid), &local, 1UL, &remote, 1UL, 0UL);
        break;
    }
    case CSTALLMON_SYSCALL_EPOLL_PWAIT2: {
        struct epoll_event event;
        struct timespec zero = {0, 0};
        result = syscall(SYS_epoll_pwait2, -1, &event, 1, &zero, NULL, 0UL);
        if (result < 0 && errno == EBADF) return 0;  // the kernel ran it: the descriptor was refused, not the call
        break;
    }
    case CSTALLMON_SYSCALL_RENAMEAT2:
        result = syscall(SYS_renameat2, AT_FDCWD, "/nonexistent/stallmon-probe", AT_FDCWD,
                         "/nonexistent/stallmon-probe-2", RENAME_NOREPLACE);
        if (result < 0 && errno == ENOENT) return 0;
        break;
    case CSTALLMON_SYSCALL_TGKILL:
        result = syscall(SYS_tgkill, (long)syscall(SYS_getpid), (long)syscall(SYS_gettid), 0);
        break;
    case CSTALLMON_SYSCALL_GETRUSAGE: {
        struct rusage usage;
        result = syscall(SYS_getrusage, RUSAGE_SELF, &usage);
        break;
    }
    case CSTALLMON_SYSCALL_IOCTL: {
        int generation = 0;
        result = syscall(SYS_ioctl, scratch_fd, FS_IOC_GETVERSION, &generation);
        if (result < 0 && (errno == ENOTTY || errno == EOPNOTSUPP || errno == EINVAL)) return 0;
        break;
    }
    default:
        return ENOSYS;
    }
    return result < 0 ? errno : 0;
}

// NOT async-signal-safe. Makes system call `which` in a child (a raw clone that signals no one at its exit, so a
// service's own SIGCHLD handler and waitpid(-1) never see it) and records the verdict: the child writes its errno to
// a pipe, or dies of the filter before it can. Waits at most 2 s.
static void probe_in_child(int which) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return;  // unknown: the call is not made, and probed again later
    long pid = syscall(SYS_clone, 0UL, NULL, NULL, NULL, 0UL);
    if (pid == 0) {
        // A filter that kills dumps core for a single-threaded victim: not this one (a service's core, written by
        // systemd-coredump at every start). And the filter's SIGSYS, if it traps instead, ends the child rather
        // than running a crash handler the service installed, in a copy of a multi-threaded process.
        (void)syscall(SYS_prctl, PR_SET_DUMPABLE, 0UL, 0UL, 0UL, 0UL);
        struct sigaction fallback;
        memset(&fallback, 0, sizeof fallback);
        fallback.sa_handler = SIG_DFL;
        (void)sigaction(SIGSYS, &fallback, NULL);
        sigset_t sys;
        sigemptyset(&sys);
        sigaddset(&sys, SIGSYS);
        (void)sigprocmask(SIG_UNBLOCK, &sys, NULL);
        int error = try_call(which, fds[1]);
        unsigned char byte = (unsigned char)(error > 255 ? 255 : error);
        (void)syscall(SYS_write, fds[1], &byte, 1UL);
        syscall(SYS_exit_group, 0);
    }
    close(fds[1]);
    if (pid < 0) {
        close(fds[0]);
        return;
    }
    unsigned char byte = 0;
    ssize_t got = -1;
    struct pollfd ready = {.fd = fds[0], .events = POLLIN};
    const uint64_t start = cstallmon_clock_monotonic_ns();
    for (;;) {
        int waited = poll(&ready, 1, 100);
        if (waited > 0) {
            got = read(fds[0], &byte, 1);
            if (got < 0 && errno == EINTR) continue;
            break;
        }
        if (waited < 0 && errno != EINTR) break;
        if (cstallmon_clock_monotonic_ns() - start >= 2000000000ULL) break;
    }
    close(fds[0]);
    int status = 0;
    if (got < 0) kill((pid_t)pid, SIGKILL);  // no answer in time: unknown
    pid_t reaped;
    while ((reaped = waitpid((pid_t)pid, &status, __WALL)) < 0 && errno == EINTR) {
    }
    if (got == 1) {
        const int error = byte;
        // EPERM, EACCES and ENOSYS are what filters return (SystemCallErrorNumber=); a kernel without the call
        // answers ENOSYS too, which means the same here: do not make it.
        const int refused = error == EPERM || error == EACCES || error == ENOSYS;
        g_filter.details[which] = error;
        atomic_store(&g_filter.verdicts[which], refused ? CSTALLMON_SYSCALL_REFUSED : CSTALLMON_SYSCALL_ALLOWED);
    } else if (got == 0 && reaped == (pid_t)pid && WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS) {
        g_filter.details[which] = SIGSYS;
        atomic_store(&g_filter.verdicts[which], CSTALLMON_SYSCALL_KILLED);
    }
    // Anything else (no child, no answer, another death, a reaper that took the child first): unknown.
}

// With the lock held. Probes `which` unless its verdict is known, or unknown and probed less than a second ago.
static void probe_locked(int which) {
    if (atomic_load(&g_filter.verdicts[which]) != CSTALLMON_SYSCALL_UNKNOWN) return;
    const int64_t now_s = (int64_t)(cstallmon_clock_monotonic_ns() / 1000000000ULL);
    if (now_s < g_filter.retry_at[which]) return;
    g_filter.retry_at[which] = now_s + 1;
    if (g_filter.seccomp_mode == 0) {
        atomic_store(&g_filter.verdicts[which], CSTALLMON_SYSCALL_ALLOWED);  // no filter: nothing to test
    } else {
        probe_in_child(which);
    }
    if (which == CSTALLMON_SYSCALL_PROCESS_VM_READV &&
        atomic_load(&g_filter.verdicts[which]) != CSTALLMON_SYSCALL_ALLOWED && atomic_load(&g_filter.mem_fd) < 0) {
        atomic_store(&g_filter.mem_fd, open("/proc/self/mem", O_RDONLY | O_CLOEXEC));
    }
}

// With the lock held. Reads the seccomp mode again: a filter installed since the last probe (a service that
// sandboxes itself after start-up) makes every verdict stale.
static void refresh_mode_locked(void) {
    const int mode = read_seccomp_mode();
    // Unreadable now (EMFILE, say): what was known stands; a mode never read is -1, and every call is probed.
    if (mode == -1 && g_filter.seccomp_mode != -2) return;
    if (mode == g_filter.seccomp_mode) return;
    g_filter.seccomp_mode = mode;
    for (int which = 0; which < CSTALLMON_SYSCALL_COUNT; which++) {
        atomic_store(&g_filter.verdicts[which], CSTALLMON_SYSCALL_UNKNOWN);
        g_filter.retry_at[which] = 0;
    }
}

void cstallmon_syscalls_probe(void) {
    pthread_mutex_lock(&g_filter.lock);
    refresh_mode_locked();
    for (int which = 0; which < CSTALLMON_SYSCALL_COUNT; which++) probe_locked(which);
    pthread_mutex_unlock(&g_filter.lock);
}

int cstallmon_syscall_allowed(int which) {
    if (which < 0 || which >= CSTALLMON_SYSCALL_COUNT) return 0;
    return atomic_load_explicit(&g_filter.verdicts[which], memory_order_relaxed) == CSTALLMON_SYSCALL_ALLOWED;
}

int cstallmon_syscall_verdict(int which, int *detail) {
    if (which < 0 || which >= CSTALLMON_SYSCALL_COUNT) return CSTALLMON_SYSCALL_UNKNOWN;
    pthread_mutex_lock(&g_filter.lock);
    if (g_filter.seccomp_mode == -2) refresh_mode_locked();
    probe_locked(which);
    if (detail != NULL) *detail = g_filter.details[which];
    const int verdict = atomic_load(&g_filter.verdicts[which]);
    pthread_mutex_unlock(&g_filter.lock);
    return verdict;
}

const char *cstallmon_syscall_name(int which) {
    return (which >= 0 && which < CSTALLMON_SYSCALL_COUNT) ? g_names[which] : "?";
}

int cstallmon_seccomp_mode(void) {
    pthread_mutex_lock(&g_filter.lock);
    if (g_filter.seccomp_mode == -2) refresh_mode_locked();
    const int mode = g_filter.seccomp_mode;
    pthread_mutex_unlock(&g_filter.lock);
    return mode;
}

int cstallmon_own_memory_readable(void) {
    return cstallmon_syscall_allowed(CSTALLMON_SYSCALL_PROCESS_VM_READV) || atomic_load(&g_filter.mem_fd) >= 0;
}

long cstallmon_vm_readv(const struct iovec *local, unsigned long local_count, const struct iovec *remote,
                        unsigned long remote_count) {
    if (cstallmon_syscall_allowed(CSTALLMON_SYSCALL_PROCESS_VM_READV)) {
        return syscall(SYS_process_vm_readv, (long)getpid(), local, local_count, remote, remote_count, 0UL);
    }
    const int mem = atomic_load_explicit(&g_filter.mem_fd, memory_order_relaxed);
    if (mem < 0 || local_count != remote_count) {
        errno = mem < 0 ? EPERM : EINVAL;
        return -1;
    }
    // As process_vm_readv: segment by segment, the bytes read until the first that could not be read whole.
    long total = 0;
    for (unsigned long index = 0; index < remote_count; index++) {
        const size_t length = remote[index].iov_len < local[index].iov_len ? remote[index].iov_len
                                                                            : local[index].iov_len;
        const uintptr_t address = (uintptr_t)remote[index].iov_base;
        if (address > (uintptr_t)INT64_MAX) break;
        ssize_t got;
        do {
            got = pread(mem, local[index].iov_base, length, (off_t)address);
        } while (got < 0 && errno == EINTR);
        if (got <= 0) {
            if (total == 0) return -1;
            break;
        }
        total += got;
        if ((size_t)got < length) break;
    }
    return total;
}
