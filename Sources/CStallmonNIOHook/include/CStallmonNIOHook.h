// CStallmonNIOHook: timestamps around a SwiftNIO event loop's selector waits.
//
// Why this exists: NIO's only per-tick hook (NIOEventLoopMetricsDelegate) fires after a tick and covers the task
// phase only; the I/O phase, where the selector hands readiness to channel handlers (channelRead, accepts, writes),
// is counted as sleep. And no delegate can be attached to MultiThreadedEventLoopGroup.singleton. Every tick of a
// SelectableEventLoop on Linux, however, begins and ends at one call: epoll_wait(2). This target defines
// `epoll_wait` itself; the program's calls (NIOPosix's among them, linked into the same executable) bind to it at
// link time. On a thread with no hook installed it is exactly glibc's epoll_pwait with no signal mask, which is what
// glibc's epoll_wait does. On a monitored loop thread it also stamps CLOCK_MONOTONIC before and after the wait on
// the loop's own selector descriptor and hands both stamps to the monitor: two clock reads per tick, as NIO pays for
// its own delegate. Other epoll_wait calls on that thread (a handler's own blocking wait) are busy time.
#ifndef CSTALLMON_NIO_HOOK_H
#define CSTALLMON_NIO_HOOK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Called on the loop thread with CLOCK_MONOTONIC nanoseconds: `before` just before the selector waits (the busy
/// interval ends), `after` just after it returns (a busy interval begins).
typedef void (*cstallmon_wait_callback)(void *context, uint64_t now_ns);
/// Releases `context` when the hook is freed (on the loop thread, or at its exit).
typedef void (*cstallmon_wait_release)(void *context);

typedef struct cstallmon_wait_hook cstallmon_wait_hook;

/// Allocates a hook, owned by the caller until `cstallmon_wait_hook_close`. Returns NULL when out of memory.
/// NOT async-signal-safe (malloc).
cstallmon_wait_hook *cstallmon_wait_hook_create(cstallmon_wait_callback before, cstallmon_wait_callback after,
                                                void *context, cstallmon_wait_release release);

/// Installs `hook` for the calling thread, which then holds a reference of its own; drops the thread's reference to
/// the hook it had before, if any. When the thread exits, the hook's `before` runs once more (an exiting loop is not
/// busy) and the thread's reference is dropped. Returns 0, or an errno value (the thread-exit key could not be
/// created; nothing was installed). NOT async-signal-safe (pthread keys, may free).
int cstallmon_wait_hook_install(cstallmon_wait_hook *hook);

/// Removes the calling thread's hook if it is `hook` (the monitor stopped; posted to the loop thread) and drops the
/// thread's reference. Returns 1 if it was installed, 0 if not. NOT async-signal-safe (may free).
int cstallmon_wait_hook_uninstall(const cstallmon_wait_hook *hook);

/// From any thread, once, by the creator: the hook stops calling its callbacks (a call already under way may
/// finish; `context` stays valid until the last reference is gone) and the creator's reference is dropped; the hook
/// is freed (and `release` called) when its thread no longer holds it. NOT async-signal-safe (may free).
void cstallmon_wait_hook_close(cstallmon_wait_hook *hook);

/// Only waits on `epoll_fd` (the loop's selector) end a tick from now on; the thread's other epoll_wait calls (a
/// handler's own blocking wait) count as busy time. -1: every epoll_wait on the thread counts as the selector's (the
/// default, for a loop whose selector descriptor could not be found). Async-signal-safe.
void cstallmon_wait_hook_set_selector(cstallmon_wait_hook *hook, int epoll_fd);

/// How many selector waits the hook has seen begin (relaxed), so a monitor can check that the loop's waits really go
/// through the hook. Call only while holding the creator's reference. Async-signal-safe.
uint64_t cstallmon_wait_hook_waits(const cstallmon_wait_hook *hook);

/// The hook installed on the calling thread, or NULL (for tests: which hook this thread's waits go through).
/// Async-signal-safe.
const cstallmon_wait_hook *cstallmon_wait_hook_current(void);

#ifdef __cplusplus
}
#endif

#endif
