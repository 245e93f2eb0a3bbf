// The image table's refresher thread: rebuilds the table when a capture asks, off the watchdog (see image_table.c).
#include "capture_state.h"
#include "image_table.h"

#include <signal.h>

// dl_iterate_phdr waits for the loader's list lock, which a thread may hold for long (a dl_iterate_phdr callback
// that does real work, a slow dlclose): the watchdog must never wait for it. A thread of its own refreshes the table
// when a capture asks; the capture goes on with the table as it is.
static _Atomic uint32_t g_refresh_requests;  // futex word
static _Atomic int g_refresher_started;

// NOT async-signal-safe: the refresher thread's body (all signals blocked on it).
static void *refresher_main(void *unused) {
    (void)unused;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    uint32_t served = atomic_load(&g_refresh_requests);
    for (;;) {
        const uint32_t requested = atomic_load(&g_refresh_requests);
        if (requested == served) {
            struct timespec idle = {.tv_sec = 1, .tv_nsec = 0};  // and retired tables get freed now and then
            syscall(SYS_futex, (int32_t *)&g_refresh_requests, FUTEX_WAIT_PRIVATE, (int32_t)served, &idle, NULL, 0);
            if (atomic_load(&g_refresh_requests) == served) {
                pthread_mutex_lock(&cstallmon_table_mutex);
                cstallmon_table_free_retired_if_quiet();
                pthread_mutex_unlock(&cstallmon_table_mutex);
            }
            continue;
        }
        served = requested;
        cstallmon_table_refresh();
    }
    return NULL;
}

int cstallmon_table_start_refresher(void) {
    int expected = 0;
    if (!atomic_compare_exchange_strong(&g_refresher_started, &expected, 1)) return 0;
    pthread_attr_t attributes;
    pthread_attr_init(&attributes);
    pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attributes, 256 * 1024);
    pthread_t thread;
    const int created = pthread_create(&thread, &attributes, refresher_main, NULL);
    pthread_attr_destroy(&attributes);
    if (created != 0) {
        atomic_store(&g_refresher_started, 0);
        return -1;
    }
    pthread_setname_np(thread, "stallmon-images");
    return 0;
}

// At most one wake-up of the refresher per this interval: waking a thread is a context switch on a machine whose
// cores the captured thread needs too. An object loaded within it may end a stack as unknown-image until then.
#define CSTALLMON_REFRESH_INTERVAL_NS (20 * 1000000ULL)
static _Atomic uint64_t g_last_refresh_request_ns;

void cstallmon_table_request_refresh(int urgent) {
    const uint64_t now = cstallmon_clock_monotonic_ns();
    uint64_t last = atomic_load_explicit(&g_last_refresh_request_ns, memory_order_relaxed);
    if (!urgent && now - last < CSTALLMON_REFRESH_INTERVAL_NS) return;
    if (!atomic_compare_exchange_strong(&g_last_refresh_request_ns, &last, now)) return;  // another watchdog did
    atomic_fetch_add(&g_refresh_requests, 1);
    syscall(SYS_futex, (int32_t *)&g_refresh_requests, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}
