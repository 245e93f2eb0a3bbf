// The epoll_wait interposer and its per-thread hook. See the header for why.
#ifndef _GNU_SOURCE
#error You must define _GNU_SOURCE
#endif

#include "cstallmon_clock.h"
#include "CStallmonNIOHook.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <time.h>

struct cstallmon_wait_hook {
    cstallmon_wait_callback before;
    cstallmon_wait_callback after;
    void *context;
    cstallmon_wait_release release;
    _Atomic int enabled;
    /// The loop's selector: only waits on this epoll descriptor end a tick (-1: every wait on the thread does).
    _Atomic int selector_fd;
    _Atomic uint64_t waits;
    /// Owners: the monitor (from create until cstallmon_wait_hook_close) and the thread it is installed on.
    _Atomic int references;
};

static struct {
    pthread_once_t key_once;
    pthread_key_t exit_key;
    int key_error;
} g_state = {.key_once = PTHREAD_ONCE_INIT};

// The calling thread's hook, read on every epoll_wait: one TLS load when no monitor watches the thread.
static __thread cstallmon_wait_hook *t_hook __attribute__((tls_model("initial-exec")));

// Replaces glibc's epoll_wait for the whole program. Async-signal-safe as glibc's is (no locks, no allocation);
// errno is that of the wait. A cancellation point, as epoll_pwait is.
int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout) {
    cstallmon_wait_hook *hook = t_hook;
    if (hook == NULL || !atomic_load_explicit(&hook->enabled, memory_order_relaxed)) {
        return epoll_pwait(epfd, events, maxevents, timeout, NULL);
    }
    int selector = atomic_load_explicit(&hook->selector_fd, memory_order_relaxed);
    if (selector >= 0 && epfd != selector) {
        // A wait of the code the loop runs (a nested synchronous client, another library's poller): the loop is
        // busy throughout it, and a long one is a stall.
        return epoll_pwait(epfd, events, maxevents, timeout, NULL);
    }
    hook->before(hook->context, cstallmon_clock_monotonic_ns());
    atomic_fetch_add_explicit(&hook->waits, 1, memory_order_relaxed);
    int result = epoll_pwait(epfd, events, maxevents, timeout, NULL);
    int saved = errno;
    hook->after(hook->context, cstallmon_clock_monotonic_ns());
    errno = saved;
    return result;
}

static void drop_reference(cstallmon_wait_hook *hook) {
    if (atomic_fetch_sub_explicit(&hook->references, 1, memory_order_acq_rel) != 1) return;
    if (hook->release != NULL) hook->release(hook->context);
    free(hook);
}

// pthread key destructor: the loop thread exits with its hook still installed.
static void thread_exits(void *value) {
    cstallmon_wait_hook *hook = value;
    if (hook == NULL) return;
    if (t_hook == hook) t_hook = NULL;
    if (atomic_load_explicit(&hook->enabled, memory_order_relaxed)) hook->before(hook->context, cstallmon_clock_monotonic_ns());
    drop_reference(hook);
}

static void create_key(void) {
    g_state.key_error = pthread_key_create(&g_state.exit_key, thread_exits);
}

// NOT async-signal-safe (malloc).
cstallmon_wait_hook *cstallmon_wait_hook_create(cstallmon_wait_callback before, cstallmon_wait_callback after,
                                                void *context, cstallmon_wait_release release) {
    cstallmon_wait_hook *hook = calloc(1, sizeof *hook);
    if (hook == NULL) return NULL;
    hook->before = before;
    hook->after = after;
    hook->context = context;
    hook->release = release;
    atomic_store_explicit(&hook->enabled, 1, memory_order_relaxed);
    atomic_store_explicit(&hook->references, 1, memory_order_relaxed);
    atomic_store_explicit(&hook->selector_fd, -1, memory_order_relaxed);
    return hook;
}

// NOT async-signal-safe (pthread keys, free).
int cstallmon_wait_hook_install(cstallmon_wait_hook *hook) {
    pthread_once(&g_state.key_once, create_key);
    if (g_state.key_error != 0) return g_state.key_error;
    cstallmon_wait_hook *previous = t_hook;
    if (previous == hook) return 0;
    atomic_fetch_add_explicit(&hook->references, 1, memory_order_relaxed);
    int error = pthread_setspecific(g_state.exit_key, hook);
    if (error != 0) {
        drop_reference(hook);
        return error;
    }
    t_hook = hook;
    if (previous != NULL) drop_reference(previous);
    return 0;
}

// NOT async-signal-safe (free).
int cstallmon_wait_hook_uninstall(const cstallmon_wait_hook *hook) {
    if (hook == NULL || t_hook != hook) return 0;
    cstallmon_wait_hook *owned = t_hook;
    t_hook = NULL;
    (void)pthread_setspecific(g_state.exit_key, NULL);
    drop_reference(owned);
    return 1;
}

// NOT async-signal-safe (may free).
void cstallmon_wait_hook_close(cstallmon_wait_hook *hook) {
    atomic_store_explicit(&hook->enabled, 0, memory_order_relaxed);
    drop_reference(hook);
}

// Async-signal-safe.
void cstallmon_wait_hook_set_selector(cstallmon_wait_hook *hook, int epoll_fd) {
    atomic_store_explicit(&hook->selector_fd, epoll_fd < 0 ? -1 : epoll_fd, memory_order_relaxed);
}

// Async-signal-safe.
const cstallmon_wait_hook *cstallmon_wait_hook_current(void) {
    return t_hook;
}

// Async-signal-safe.
uint64_t cstallmon_wait_hook_waits(const cstallmon_wait_hook *hook) {
    return atomic_load_explicit(&((cstallmon_wait_hook *)hook)->waits, memory_order_relaxed);
}
