#ifndef _GNU_SOURCE
#error You must define _GNU_SOURCE (Package.swift does)
#endif
#include "CStallmonLoopShims.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <stdint.h>
#include <linux/fs.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

_Static_assert(CSTALLMON_EPOLLIN == EPOLLIN, "EPOLLIN mirror");
_Static_assert(CSTALLMON_EPOLLOUT == EPOLLOUT, "EPOLLOUT mirror");
_Static_assert(CSTALLMON_EPOLLERR == EPOLLERR, "EPOLLERR mirror");
_Static_assert(CSTALLMON_EPOLLHUP == EPOLLHUP, "EPOLLHUP mirror");
_Static_assert(CSTALLMON_EPOLLRDHUP == EPOLLRDHUP, "EPOLLRDHUP mirror");

int cstallmon_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }

static int epoll_control(int epfd, int op, int fd, uint32_t events, uint64_t token) {
    struct epoll_event event = {.events = events, .data = {.u64 = token}};
    return epoll_ctl(epfd, op, fd, &event);
}

int cstallmon_epoll_add(int epfd, int fd, uint32_t events, uint64_t token) {
    return epoll_control(epfd, EPOLL_CTL_ADD, fd, events, token);
}

int cstallmon_epoll_modify(int epfd, int fd, uint32_t events, uint64_t token) {
    return epoll_control(epfd, EPOLL_CTL_MOD, fd, events, token);
}

int cstallmon_epoll_remove(int epfd, int fd) { return epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL); }

// -1: untested, 1: epoll_pwait2 works, 0: kernel lacks it (ENOSYS); a benign race only repeats the probe.
static int g_has_pwait2 = -1;

int cstallmon_epoll_wait(int epfd, cstallmon_ready_event *out, int max_events, int64_t timeout_ns) {
    enum { BATCH = 64 };
    struct epoll_event events[BATCH];
    if (max_events > BATCH) max_events = BATCH;
    int count;
    // Once per process: only where the probe (`cstallmon_syscalls_probe`, run by every Looper's init) allowed it.
    if (g_has_pwait2 < 0 && !cstallmon_syscall_allowed(CSTALLMON_SYSCALL_EPOLL_PWAIT2)) g_has_pwait2 = 0;
    if (g_has_pwait2 != 0) {
        struct timespec timeout;
        struct timespec *timeout_ptr = NULL;
        if (timeout_ns >= 0) {
            timeout.tv_sec = (time_t)(timeout_ns / 1000000000LL);
            timeout.tv_nsec = (long)(timeout_ns % 1000000000LL);
            timeout_ptr = &timeout;
        }
        count = epoll_pwait2(epfd, events, max_events, timeout_ptr, NULL);
        if (count < 0 && errno == ENOSYS) {
            g_has_pwait2 = 0;
        } else {
            g_has_pwait2 = 1;
            goto copy;
        }
    }
    {
        int timeout_ms = -1;
        if (timeout_ns >= 0) {
            int64_t ms = (timeout_ns + 999999LL) / 1000000LL;
            timeout_ms = ms > INT32_MAX ? INT32_MAX : (int)ms;
        }
        // epoll_pwait with no mask is epoll_wait; called by its own name so that the program-wide epoll_wait
        // StallmonNIO defines (CStallmonNIOHook, timing NIO's selector waits) never times the Looper's waits.
        count = epoll_pwait(epfd, events, max_events, timeout_ms, NULL);
    }
copy:
    for (int i = 0; i < count; i++) {
        out[i].token = events[i].data.u64;
        out[i].events = events[i].events;
    }
    return count;
}

int cstallmon_eventfd_create(void) { return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); }

int cstallmon_eventfd_signal(int fd) {
    uint64_t one = 1;
    for (;;) {
        ssize_t written = write(fd, &one, sizeof one);
        if (written == (ssize_t)sizeof one) return 0;
        if (written < 0 && errno == EINTR) continue;
        if (written < 0 && errno == EAGAIN) return 0;  // counter saturated: a wake-up is already pending
        return -1;
    }
}

int cstallmon_eventfd_drain(int fd) {
    uint64_t value = 0;
    for (;;) {
        ssize_t got = read(fd, &value, sizeof value);
        if (got == (ssize_t)sizeof value) return 0;
        if (got < 0 && errno == EINTR) continue;
        if (got < 0 && errno == EAGAIN) return 0;
        return -1;
    }
}

pid_t cstallmon_gettid(void) { return gettid(); }

int cstallmon_wait_readable(int fd, int64_t timeout_ns) {
    struct pollfd entry = {.fd = fd, .events = POLLIN};
    struct timespec timeout;
    struct timespec *timeout_ptr = NULL;
    if (timeout_ns >= 0) {
        timeout.tv_sec = (time_t)(timeout_ns / 1000000000LL);
        timeout.tv_nsec = (long)(timeout_ns % 1000000000LL);
        timeout_ptr = &timeout;
    }
    int rc = ppoll(&entry, 1, timeout_ptr, NULL);
    if (rc < 0) return errno == EINTR ? 0 : -1;
    return rc > 0 ? 1 : 0;
}

void cstallmon_set_thread_name(const char *name) {
    char truncated[16];
    strncpy(truncated, name, sizeof truncated - 1);
    truncated[sizeof truncated - 1] = '\0';
    pthread_setname_np(pthread_self(), truncated);
}

static __thread void *current_loop;

void *cstallmon_loop_current(void) {
    return current_loop;
}

void cstallmon_loop_set_current(void *loop) {
    current_loop = loop;
}

int cstallmon_signalfd_open(const int *signals, int count) {
    sigset_t set;
    sigemptyset(&set);
    for (int index = 0; index < count; index++) {
        if (sigaddset(&set, signals[index]) != 0) return -1;
    }
    int error = pthread_sigmask(SIG_BLOCK, &set, NULL);
    if (error != 0) {
        errno = error;
        return -1;
    }
    return signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
}

int cstallmon_signalfd_take(int fd) {
    struct signalfd_siginfo info;
    for (;;) {
        ssize_t got = read(fd, &info, sizeof info);
        if (got == (ssize_t)sizeof info) return (int)info.ssi_signo;
        if (got < 0 && errno == EINTR) continue;
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        if (got >= 0) errno = EIO;
        return -1;
    }
}

int cstallmon_file_generation(int fd, uint32_t *generation) {
    if (cstallmon_syscall_verdict(CSTALLMON_SYSCALL_IOCTL, NULL) != CSTALLMON_SYSCALL_ALLOWED) {
        errno = ENOSYS;
        return -1;
    }
    int value = 0;
    if (ioctl(fd, FS_IOC_GETVERSION, &value) != 0) return -1;
    *generation = (uint32_t)value;
    return 0;
}

int cstallmon_rename_noreplace(const char *from, const char *to) {
    if (cstallmon_syscall_verdict(CSTALLMON_SYSCALL_RENAMEAT2, NULL) != CSTALLMON_SYSCALL_ALLOWED) {
        errno = ENOSYS;
        return -1;
    }
    return renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE);
}
