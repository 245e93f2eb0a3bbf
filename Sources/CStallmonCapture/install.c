// Installing and releasing the sampling signal, and finding the dynamic loader's list lock the handler must never
// unwind a holder of. NOT async-signal-safe: runs at install and release only, never in the handler.
#include "capture_state.h"
#include <CStallmonLoopShims.h>

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// MARK: - Installation (NOT async-signal-safe)

static void describe_handler(const struct sigaction *action, char *out, size_t size) {
    void *address = (action->sa_flags & SA_SIGINFO) ? (void *)action->sa_sigaction : (void *)action->sa_handler;
    if (action->sa_handler == SIG_IGN) {
        snprintf(out, size, "SIG_IGN");
        return;
    }
    Dl_info symbol;
    if (dladdr(address, &symbol) && symbol.dli_sname) {
        snprintf(out, size, "%s (%p in %s)", symbol.dli_sname, address, symbol.dli_fname ? symbol.dli_fname : "?");
    } else {
        snprintf(out, size, "%p", address);
    }
}

static void describe_signal(int signal_number, char *out, size_t size) {
    if (signal_number >= SIGRTMIN && signal_number <= SIGRTMAX) {
        snprintf(out, size, "SIGRTMIN+%d (%d)", signal_number - SIGRTMIN, signal_number);
    } else {
        snprintf(out, size, "signal %d", signal_number);
    }
}

static int find_loader(struct dl_phdr_info *info, size_t size, void *unused) {
    (void)size;
    (void)unused;
    if (!info->dlpi_name || !strstr(info->dlpi_name, "ld-linux")) return 0;
    uintptr_t low = UINTPTR_MAX, high = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *header = &info->dlpi_phdr[i];
        if (header->p_type != PT_LOAD || !(header->p_flags & PF_X)) continue;
        uintptr_t start = info->dlpi_addr + header->p_vaddr;
        if (start < low) low = start;
        if (start + header->p_memsz > high) high = start + header->p_memsz;
    }
    if (high > low) {
        g_state.loader_low = low;
        g_state.loader_high = high;
    }
    return 1;
}

// What find_load_write_lock's dl_iterate_phdr callback saw of _rtld_global while dl_iterate_phdr held its lock.
typedef struct {
    const unsigned char *rtld_global;
    size_t size;
    unsigned char *inside;  // a copy taken inside the callback
    int copied;
} lock_probe;

// NOT async-signal-safe (runs inside dl_iterate_phdr, at install only). Copies _rtld_global while the list lock is
// held by this thread.
static int copy_rtld_global(struct dl_phdr_info *info, size_t size, void *context) {
    (void)info;
    (void)size;
    lock_probe *probe = context;
    memcpy(probe->inside, probe->rtld_global, probe->size);
    probe->copied = 1;
    return 1;  // one object is enough
}

// NOT async-signal-safe (allocates, calls dl_iterate_phdr). Finds _rtld_global._dl_load_write_lock without knowing
// glibc's private layout: the one recursive mutex in _rtld_global that is free before dl_iterate_phdr and held by
// this thread (count 1, owner our tid) inside its callback. Anything but exactly one such mutex: not found.
static const int32_t *find_load_write_lock(void) {
    const unsigned char *rtld_global = dlsym(RTLD_DEFAULT, "_rtld_global");
    Dl_info info;
    const ElfW(Sym) *symbol = NULL;
    if (!rtld_global || !dladdr1(rtld_global, &info, (void **)&symbol, RTLD_DL_SYMENT) || !symbol) return NULL;
    const size_t size = symbol->st_size;
    if (size < 40 || size > (1 << 20)) return NULL;
    lock_probe probe = {.rtld_global = rtld_global, .size = size, .inside = malloc(size)};
    unsigned char *before = malloc(size);
    const int32_t *found = NULL;
    if (probe.inside && before) {
        memcpy(before, rtld_global, size);
        dl_iterate_phdr(copy_rtld_global, &probe);
        const int32_t tid = (int32_t)syscall(SYS_gettid);
        int matches = 0;
        for (size_t offset = 0; probe.copied && offset + 20 <= size; offset += 8) {
            int32_t outside_words[5], inside_words[5];  // __lock, __count, __owner, __nusers, __kind
            memcpy(outside_words, before + offset, sizeof outside_words);
            memcpy(inside_words, probe.inside + offset, sizeof inside_words);
            const int free_before = outside_words[0] == 0 && outside_words[1] == 0 && outside_words[2] == 0 &&
                                    outside_words[4] == PTHREAD_MUTEX_RECURSIVE_NP;
            const int held_inside = inside_words[0] != 0 && inside_words[1] == 1 && inside_words[2] == tid &&
                                    inside_words[4] == PTHREAD_MUTEX_RECURSIVE_NP;
            if (free_before && held_inside) {
                matches++;
                found = (const int32_t *)(rtld_global + offset);
            }
        }
        if (matches != 1) found = NULL;
    }
    free(before);
    free(probe.inside);
    return found;
}

// NOT async-signal-safe. Records the code ranges in which a thread may hold the loader lock, and the lock itself
// (see the handler).
static void record_loader_ranges(void) {
    long page = sysconf(_SC_PAGESIZE);
    g_state.page_size = page > 0 ? (uintptr_t)page : 4096;
    dl_iterate_phdr(find_loader, NULL);
    void *iterate = dlsym(RTLD_DEFAULT, "dl_iterate_phdr");
    Dl_info info;
    const ElfW(Sym) *symbol = NULL;
    if (iterate && dladdr1(iterate, &info, (void **)&symbol, RTLD_DL_SYMENT) && symbol && symbol->st_size > 0) {
        g_state.iterate_low = (uintptr_t)iterate;
        g_state.iterate_high = (uintptr_t)iterate + symbol->st_size;
    } else if (iterate) {
        g_state.iterate_low = (uintptr_t)iterate;
        g_state.iterate_high = (uintptr_t)iterate + 1024;  // unknown size: a generous guess
    }
    g_state.load_write_lock = find_load_write_lock();
}

// Runs libunwind once outside any handler: its one-time global init (tdep_init) takes locks we must never meet
// inside the handler.
static void prime_unwinder(void) {
    unw_context_t context;
    unw_cursor_t cursor;
    if (unw_getcontext(&context) < 0) return;
    if (unw_init_local(&cursor, &context) < 0) return;
    for (int depth = 0; depth < 64 && unw_step(&cursor) > 0; depth++) {}
}

int cstallmon_install(int signal_number, char *error_buffer, size_t error_buffer_size) {
    char signal_name[48];
    describe_signal(signal_number, signal_name, sizeof signal_name);
    if (signal_number < SIGRTMIN || signal_number > SIGRTMAX) {
        snprintf(error_buffer, error_buffer_size, "%s is not a real-time signal (SIGRTMIN..SIGRTMAX is %d..%d)",
                 signal_name, SIGRTMIN, SIGRTMAX);
        return -1;
    }
    // Before the image table is built: its checks read this process's memory through the probe's verdict
    // (process_vm_readv, or /proc/self/mem where a seccomp filter forbids it).
    (void)cstallmon_syscall_verdict(CSTALLMON_SYSCALL_PROCESS_VM_READV, NULL);
    pthread_mutex_lock(&g_state.mutex);
    const int owned = atomic_load(&g_state.signal_number);
    if (owned != 0) {
        int result = 0;
        if (owned == signal_number) {
            g_state.references++;
        } else {
            char owned_name[48];
            describe_signal(owned, owned_name, sizeof owned_name);
            snprintf(error_buffer, error_buffer_size,
                     "stallmon already samples with %s in this process; every monitor must use the same signal, "
                     "asked for %s", owned_name, signal_name);
            result = -1;
        }
        pthread_mutex_unlock(&g_state.mutex);
        return result;
    }
    struct sigaction existing;
    if (sigaction(signal_number, NULL, &existing) != 0) {
        snprintf(error_buffer, error_buffer_size, "sigaction(%s) failed: %s", signal_name, strerror(errno));
        pthread_mutex_unlock(&g_state.mutex);
        return -1;
    }
    if (existing.sa_handler != SIG_DFL) {
        char owner[256];
        describe_handler(&existing, owner, sizeof owner);
        snprintf(error_buffer, error_buffer_size,
                 "%s is already taken by another handler: %s; choose another signal (config key `signal`)",
                 signal_name, owner);
        pthread_mutex_unlock(&g_state.mutex);
        return -1;
    }
    record_loader_ranges();
    // The handler's unwinder reads a table of the loaded images we keep, never the loader (image_table.c).
    if (!g_state.unwinder_uses_table && cstallmon_table_refresh() >= 0 && cstallmon_table_start_refresher() == 0 &&
        cstallmon_table_patch_unwinder() == 0) {
        g_state.unwinder_uses_table = 1;
    }
    // libunwind's register-state cache makes a sample ~100x cheaper, and its fast trace (the per-thread cache of
    // frame shapes that keeps the handler under a microsecond) works only with it; but Debian's libunwind has no
    // per-thread register-state caches: the cache sits behind one global mutex, taken with every signal blocked,
    // and held while libunwind looks up unwind tables (dl_iterate_phdr). With the table, a handler holding it waits
    // for nothing; a thread outside the handler holding it (the application's own unwinding) never waits long for
    // the loader's list lock either: it only tries it (image_table.c, iterate_outside_handler). The
    // suite once deadlocked on each: a thread holding the loader's list lock waited for a lock of the sampled thread,
    // whose handler waited for the cache mutex while its holder waited in dl_iterate_phdr for the list lock (first
    // the handler's own lookups, later Swift Testing's backtrace of a thrown error). Without the table or without
    // the lock's address (another libunwind build, an unknown glibc) the cache stays off, and the handler path takes
    // no libunwind lock.
    unw_set_caching_policy(unw_local_addr_space, g_state.unwinder_uses_table && g_state.load_write_lock
                                                     ? UNW_CACHE_GLOBAL : UNW_CACHE_NONE);
    prime_unwinder();

    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = sampling_handler;
    action.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    if (sigaction(signal_number, &action, NULL) != 0) {
        snprintf(error_buffer, error_buffer_size, "sigaction(%s) failed: %s", signal_name, strerror(errno));
        pthread_mutex_unlock(&g_state.mutex);
        return -1;
    }
    atomic_store(&g_state.signal_number, signal_number);
    g_state.references = 1;
    pthread_mutex_unlock(&g_state.mutex);
    return 0;
}

void cstallmon_release(void) {
    pthread_mutex_lock(&g_state.mutex);
    if (g_state.references > 0) g_state.references--;
    pthread_mutex_unlock(&g_state.mutex);
}
