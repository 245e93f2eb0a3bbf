#ifndef _GNU_SOURCE
#error You must define _GNU_SOURCE (Package.swift does)
#endif
#include "CStallmonCapture.h"

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

// On x86_64 and aarch64 Linux, libunwind's local context is the kernel's ucontext (x86_64) or wraps it at offset 0
// (aarch64), so the handler can start unwinding from the interrupted context it is given.
#if defined(__x86_64__)
_Static_assert(sizeof(unw_context_t) == sizeof(ucontext_t), "libunwind x86_64 context must be a ucontext_t");
#endif

// MARK: - Slot states

enum {
    SLOT_FREE = 0,              // not assigned to a thread
    SLOT_IDLE = 1,              // assigned; no signal in flight
    SLOT_REQUESTED = 2,         // armed and signalled; the handler has not started
    SLOT_RUNNING = 3,           // the handler is unwinding
    SLOT_DONE = 4,              // frames published; the watchdog collects them
    SLOT_ABANDONED = 5,         // the watchdog gave up before the handler started; the late handler drains it
    SLOT_ABANDONED_RUNNING = 6, // the watchdog gave up while the handler ran; the handler drains it at its end
    SLOT_FREEING = 7,           // being returned to FREE by whoever won the race
};

typedef struct {
    _Atomic int32_t state;      // futex word: the watchdog sleeps on it, the handler wakes it
    _Atomic pid_t tid;
    _Atomic int32_t retired;    // released by its owner while a late handler may still come
    uint32_t max_frames;        // written by the watchdog before arming, read by the handler
    uint32_t frame_count;       // written by the handler before DONE
    uintptr_t stack_low;        // the thread's stack bounds, recorded at warm-up (0: unknown)
    uintptr_t stack_high;
    int32_t in_loader;          // the handler found the thread inside the dynamic loader
    uint32_t truncated;
    int32_t unwind_error;
    uint64_t entered_ns;
    uint64_t done_ns;
    uintptr_t frames[CSTALLMON_MAX_FRAMES];
} capture_slot;

// Everything the handler touches, allocated before any signal can arrive.
static struct {
    pthread_mutex_t mutex;          // guards install, release and slot ownership; never taken by the handler
    _Atomic int signal_number;      // 0 until installed
    int references;
    // Code that may run while holding the loader lock, which libunwind's dl_iterate_phdr also takes: the dynamic
    // loader (ld.so) and dl_iterate_phdr itself. Recorded at install, read by the handler.
    uintptr_t loader_low, loader_high;
    uintptr_t iterate_low, iterate_high;
    uintptr_t page_size;
    // glibc's lock on the list of loaded objects (_rtld_global._dl_load_write_lock, a recursive pthread mutex),
    // which dl_iterate_phdr takes: found at install by watching which mutex in _rtld_global dl_iterate_phdr holds.
    // NULL when it could not be found; the handler then falls back to scanning the stack.
    const int32_t *load_write_lock;
    capture_slot slots[CSTALLMON_MAX_SLOTS];
} g_state = {.mutex = PTHREAD_MUTEX_INITIALIZER};

// MARK: - Small async-signal-safe helpers

static uint64_t monotonic_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000000ULL + (uint64_t)now.tv_nsec;
}

uint64_t cstallmon_monotonic_ns(void) { return monotonic_ns(); }

uint64_t cstallmon_realtime_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (uint64_t)now.tv_sec * 1000000000ULL + (uint64_t)now.tv_nsec;
}

pid_t cstallmon_gettid(void) { return (pid_t)syscall(SYS_gettid); }

int cstallmon_sigrtmin(void) { return SIGRTMIN; }
int cstallmon_sigrtmax(void) { return SIGRTMAX; }
int cstallmon_installed_signal(void) { return atomic_load(&g_state.signal_number); }
int cstallmon_loader_lock_found(void) { return g_state.load_write_lock != NULL; }

static void futex_wake_all(_Atomic int32_t *word) {
    syscall(SYS_futex, (int32_t *)word, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
}

// Async-signal-safe. Returns a slot whose watchdog gave up to IDLE, or to FREE when its owner released it.
static void drain_abandoned(capture_slot *slot, int32_t from) {
    int32_t expected = from;
    if (!atomic_compare_exchange_strong(&slot->state, &expected, SLOT_IDLE)) return;
    if (atomic_load(&slot->retired)) {
        expected = SLOT_IDLE;
        if (atomic_compare_exchange_strong(&slot->state, &expected, SLOT_FREEING)) {
            atomic_store(&slot->tid, 0);
            atomic_store(&slot->retired, 0);
            atomic_store(&slot->state, SLOT_FREE);
        }
    }
    futex_wake_all(&slot->state);
}

// MARK: - The handler (async-signal-safe)

static int in_loader_code(uintptr_t address) {
    return (address >= g_state.loader_low && address < g_state.loader_high) ||
           (address >= g_state.iterate_low && address < g_state.iterate_high);
}

// Async-signal-safe (reads one mutex's words). True when `tid` holds, or may be taking, the loader's list lock:
// the lock word is set and the owner is that thread, or not yet recorded (pthread_mutex_lock sets the owner just
// after the lock word). Unwinding would then call dl_iterate_phdr on a lock this very thread holds, possibly half
// taken. A lock another thread holds only makes the unwind wait for it, and that thread is not stopped.
static int loader_lock_held_by(const int32_t *mutex, pid_t tid) {
    // struct __pthread_mutex_s: __lock at 0, __count at 4, __owner at 8.
    if (__atomic_load_n(&mutex[0], __ATOMIC_ACQUIRE) == 0) return 0;
    const int32_t owner = __atomic_load_n(&mutex[2], __ATOMIC_RELAXED);
    return owner == 0 || owner == tid;
}

// Async-signal-safe. True when unwinding the interrupted thread could deadlock or read a list being changed: its
// program counter is in the dynamic loader or dl_iterate_phdr, or it holds the loader's list lock. Without the
// lock's address (an unknown glibc), the top 1 KiB of its stack is scanned for return addresses into the loader
// instead, which stale addresses in live frames can fool into skipping samples.
static int interrupted_in_loader(const capture_slot *slot, const ucontext_t *context, pid_t tid) {
#if defined(__x86_64__)
    const uintptr_t pc = (uintptr_t)context->uc_mcontext.gregs[REG_RIP];
    if (in_loader_code(pc)) return 1;
    if (g_state.load_write_lock) return loader_lock_held_by(g_state.load_write_lock, tid);
    const uintptr_t sp = (uintptr_t)context->uc_mcontext.gregs[REG_RSP] & ~(uintptr_t)7;
    // The loader frame that takes or holds the lock sits right above the interrupted point (pthread_mutex_lock
    // called from _dl_close_worker, say), so 1 KiB suffices.
    uintptr_t end = sp + 1024;
    if (slot->stack_high != 0 && sp >= slot->stack_low && sp < slot->stack_high) {
        if (end > slot->stack_high) end = slot->stack_high;
    } else {
        // Bounds unknown (no warm-up on this thread) or RSP elsewhere (an alternate stack): only the page holding
        // RSP is known to be mapped.
        uintptr_t page_end = (sp | (g_state.page_size - 1)) + 1;
        if (end > page_end) end = page_end;
    }
    for (const uintptr_t *word = (const uintptr_t *)sp; (uintptr_t)word < end; word++) {
        if (in_loader_code(*word)) return 1;
    }
#else
    (void)slot;
    (void)context;
    if (g_state.load_write_lock) return loader_lock_held_by(g_state.load_write_lock, tid);
#endif
    return 0;
}

// Async-signal-safe after the thread's warm-up. libunwind's fast trace (unw_backtrace) walks from the handler's
// own context through the signal trampoline using a per-thread cache of frame shapes, a few times cheaper per frame
// than unw_step. Its per-thread cache is created on the thread's first trace, which cstallmon_warm_up triggers at a
// known point of the monitored thread (not interrupting arbitrary code). The frames above the interrupted program
// counter (the handler, the trampoline) are dropped; if that PC is not found, fall back to unw_step.
static int fast_trace_into(capture_slot *slot, void *ucontext) {
#if defined(__x86_64__)
    enum { EXTRA = 16 };
    void *buffer[CSTALLMON_MAX_FRAMES + EXTRA];
    const uintptr_t interrupted = (uintptr_t)((ucontext_t *)ucontext)->uc_mcontext.gregs[REG_RIP];
    const uint32_t limit = slot->max_frames;
    int count = unw_backtrace(buffer, (int)(limit + EXTRA));
    for (int start = 0; start < count && start < EXTRA; start++) {
        if ((uintptr_t)buffer[start] != interrupted) continue;
        uint32_t kept = 0;
        for (int index = start; index < count && kept < limit; index++) slot->frames[kept++] = (uintptr_t)buffer[index];
        slot->frame_count = kept;
        slot->truncated = (uint32_t)(count - start) > kept || count == (int)(limit + EXTRA);
        return 1;
    }
#else
    (void)slot;
    (void)ucontext;
#endif
    return 0;
}

// Async-signal-safe: only atomics, clock_gettime, syscall(gettid/futex) and libunwind's local unwinder, whose
// unw_init_local2/unw_step are documented signal-safe. With the register-state cache on (see cstallmon_install)
// they take libunwind's cache mutex, with all signals blocked, so no holder of it can be interrupted by us; the
// handler never unwinds a thread holding the loader's list lock, which that mutex's holder may wait for.
static void unwind_into(capture_slot *slot, void *ucontext) {
    unw_cursor_t cursor;
    slot->frame_count = 0;
    slot->truncated = 0;
    slot->unwind_error = 0;
    if (fast_trace_into(slot, ucontext)) return;
    int rc = unw_init_local2(&cursor, (unw_context_t *)ucontext, UNW_INIT_SIGNAL_FRAME);
    if (rc < 0) {
        slot->unwind_error = rc;
        return;
    }
    uint32_t count = 0;
    const uint32_t limit = slot->max_frames;
    for (;;) {
        unw_word_t ip = 0;
        if (unw_get_reg(&cursor, UNW_REG_IP, &ip) < 0 || ip == 0) break;
        if (count == limit) {
            slot->truncated = 1;
            break;
        }
        slot->frames[count++] = (uintptr_t)ip;
        if (unw_step(&cursor) <= 0) break;
    }
    slot->frame_count = count;
}

// Async-signal-safe. errno is saved and restored; nothing allocates, locks or prints.
static void sampling_handler(int signal_number, siginfo_t *info, void *ucontext) {
    (void)signal_number;
    (void)info;
    const int saved_errno = errno;
    const pid_t self = (pid_t)syscall(SYS_gettid);
    const uint64_t entered = monotonic_ns();
    for (int index = 0; index < CSTALLMON_MAX_SLOTS; index++) {
        capture_slot *slot = &g_state.slots[index];
        if (atomic_load(&slot->tid) != self) continue;
        int32_t state = atomic_load(&slot->state);
        if (state == SLOT_REQUESTED) {
            int32_t expected = SLOT_REQUESTED;
            if (!atomic_compare_exchange_strong(&slot->state, &expected, SLOT_RUNNING)) {
                if (expected == SLOT_ABANDONED) drain_abandoned(slot, SLOT_ABANDONED);
                continue;
            }
            slot->in_loader = interrupted_in_loader(slot, (const ucontext_t *)ucontext, self);
            if (slot->in_loader) {
                slot->frame_count = 0;
                slot->truncated = 0;
                slot->unwind_error = 0;
            } else {
                unwind_into(slot, ucontext);
            }
            slot->entered_ns = entered;
            slot->done_ns = monotonic_ns();
            expected = SLOT_RUNNING;
            if (!atomic_compare_exchange_strong(&slot->state, &expected, SLOT_DONE)) {
                drain_abandoned(slot, SLOT_ABANDONED_RUNNING);  // the watchdog stopped waiting meanwhile
            } else {
                futex_wake_all(&slot->state);
            }
        } else if (state == SLOT_ABANDONED) {
            drain_abandoned(slot, SLOT_ABANDONED);
        }
    }
    errno = saved_errno;
}

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
    // libunwind's register-state cache makes a sample ~10x cheaper, but Debian's libunwind has no per-thread
    // caches: the cache sits behind one global mutex (taken with signals blocked). The fault suite deadlocked on it
    // while the handler could unwind a thread holding the loader's list lock: that thread waited in our handler for
    // the cache mutex while its holder, another thread unwinding, waited in dl_iterate_phdr for the list lock.
    // With the list lock found, the handler never unwinds its holder, and no such cycle remains: cache on. Without
    // it (an unknown glibc), caching stays off and the handler path takes no libunwind lock.
    unw_set_caching_policy(unw_local_addr_space, g_state.load_write_lock ? UNW_CACHE_GLOBAL : UNW_CACHE_NONE);
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

// MARK: - Slots (NOT async-signal-safe)

int cstallmon_slot_acquire(pid_t tid) {
    int chosen = -1;
    pthread_mutex_lock(&g_state.mutex);
    for (int index = 0; index < CSTALLMON_MAX_SLOTS; index++) {
        capture_slot *slot = &g_state.slots[index];
        if (atomic_load(&slot->state) != SLOT_FREE) continue;
        atomic_store(&slot->retired, 0);
        atomic_store(&slot->tid, tid);
        atomic_store(&slot->state, SLOT_IDLE);
        chosen = index;
        break;
    }
    pthread_mutex_unlock(&g_state.mutex);
    return chosen;
}

void cstallmon_slot_release(int index) {
    if (index < 0 || index >= CSTALLMON_MAX_SLOTS) return;
    capture_slot *slot = &g_state.slots[index];
    pthread_mutex_lock(&g_state.mutex);
    atomic_store(&slot->retired, 1);
    int32_t expected = SLOT_IDLE;
    if (atomic_compare_exchange_strong(&slot->state, &expected, SLOT_FREEING)) {
        atomic_store(&slot->tid, 0);
        atomic_store(&slot->retired, 0);
        atomic_store(&slot->state, SLOT_FREE);
    }
    // Otherwise a late handler is still owed this slot and frees it when it runs, unless the thread is gone:
    // its pending signal died with it, so nobody else will.
    else if (syscall(SYS_tgkill, getpid(), atomic_load(&slot->tid), 0) != 0 && errno == ESRCH) {
        atomic_store(&slot->tid, 0);
        atomic_store(&slot->retired, 0);
        atomic_store(&slot->state, SLOT_FREE);
    }
    pthread_mutex_unlock(&g_state.mutex);
}

// MARK: - Capture (the waiting side; NOT async-signal-safe, bounded)

void cstallmon_capture(int index, uintptr_t *frames, uint32_t max_frames, int64_t timeout_ns,
                       cstallmon_capture_result *result) {
    memset(result, 0, sizeof *result);
    const int signal_number = atomic_load(&g_state.signal_number);
    if (index < 0 || index >= CSTALLMON_MAX_SLOTS || signal_number == 0) {
        result->status = CSTALLMON_CAPTURE_NOT_READY;
        return;
    }
    capture_slot *slot = &g_state.slots[index];
    int32_t state = atomic_load(&slot->state);
    if (state == SLOT_ABANDONED || state == SLOT_ABANDONED_RUNNING) {
        // Never re-signal while a handler may still run. A thread that has exited took its pending signal with it,
        // and signal 0 only probes existence.
        if (syscall(SYS_tgkill, getpid(), atomic_load(&slot->tid), 0) != 0 && errno == ESRCH) {
            result->status = CSTALLMON_CAPTURE_SIGNAL_FAILED;
            result->error_number = ESRCH;
            return;
        }
        result->status = CSTALLMON_CAPTURE_PENDING;
        return;
    }
    if (state != SLOT_IDLE) {
        result->status = CSTALLMON_CAPTURE_NOT_READY;
        return;
    }
    slot->max_frames = max_frames < CSTALLMON_MAX_FRAMES ? max_frames : CSTALLMON_MAX_FRAMES;
    int32_t expected = SLOT_IDLE;
    if (!atomic_compare_exchange_strong(&slot->state, &expected, SLOT_REQUESTED)) {
        result->status = CSTALLMON_CAPTURE_NOT_READY;
        return;
    }
    const pid_t tid = atomic_load(&slot->tid);
    result->signal_sent_ns = monotonic_ns();
    if (syscall(SYS_tgkill, getpid(), tid, signal_number) != 0) {
        result->status = CSTALLMON_CAPTURE_SIGNAL_FAILED;
        result->error_number = errno;
        expected = SLOT_REQUESTED;
        if (atomic_compare_exchange_strong(&slot->state, &expected, SLOT_IDLE)) return;
        // A handler still owed from before served this request after all: fall through and wait for it.
    }
    const uint64_t deadline = result->signal_sent_ns + (uint64_t)(timeout_ns > 0 ? timeout_ns : 0);
    for (;;) {
        state = atomic_load(&slot->state);
        if (state == SLOT_DONE) break;
        const uint64_t now = monotonic_ns();
        if (now >= deadline) {
            expected = SLOT_REQUESTED;
            if (atomic_compare_exchange_strong(&slot->state, &expected, SLOT_ABANDONED)) {
                result->status = CSTALLMON_CAPTURE_TIMED_OUT;
                return;
            }
            if (expected == SLOT_RUNNING) {
                if (atomic_compare_exchange_strong(&slot->state, &expected, SLOT_ABANDONED_RUNNING)) {
                    result->status = CSTALLMON_CAPTURE_TIMED_OUT;
                    return;
                }
            }
            if (expected == SLOT_DONE) break;  // finished just now
            result->status = CSTALLMON_CAPTURE_TIMED_OUT;
            return;
        }
        const uint64_t remaining = deadline - now;
        struct timespec wait = {.tv_sec = (time_t)(remaining / 1000000000ULL),
                                .tv_nsec = (long)(remaining % 1000000000ULL)};
        syscall(SYS_futex, (int32_t *)&slot->state, FUTEX_WAIT_PRIVATE, state, &wait, NULL, 0);
    }
    // DONE: the handler's plain writes happened before its release-store of DONE, which we just acquired.
    const uint32_t count = slot->frame_count < max_frames ? slot->frame_count : max_frames;
    memcpy(frames, slot->frames, count * sizeof(uintptr_t));
    result->frame_count = count;
    result->truncated = slot->truncated;
    result->handler_entered_ns = slot->entered_ns;
    result->handler_done_ns = slot->done_ns;
    if (slot->in_loader) {
        result->status = CSTALLMON_CAPTURE_IN_LOADER;
    } else if (slot->unwind_error != 0) {
        result->status = CSTALLMON_CAPTURE_UNWIND_FAILED;
        result->error_number = slot->unwind_error;
    } else {
        result->status = CSTALLMON_CAPTURE_OK;
    }
    atomic_store(&slot->state, SLOT_IDLE);
}

int cstallmon_warm_up(int index) {
    // The signal is ours; a mask inherited from whoever created this thread (test runners, thread pools block
    // everything) must not hide the loop from the watchdog.
    const int signal_number = atomic_load(&g_state.signal_number);
    if (signal_number != 0) {
        sigset_t ours;
        sigemptyset(&ours);
        sigaddset(&ours, signal_number);
        pthread_sigmask(SIG_UNBLOCK, &ours, NULL);
    }
    // The stack bounds let the handler scan the interrupted stack safely (see interrupted_in_loader).
    if (index >= 0 && index < CSTALLMON_MAX_SLOTS) {
        pthread_attr_t attributes;
        if (pthread_getattr_np(pthread_self(), &attributes) == 0) {
            void *low = NULL;
            size_t size = 0;
            if (pthread_attr_getstack(&attributes, &low, &size) == 0) {
                g_state.slots[index].stack_low = (uintptr_t)low;
                g_state.slots[index].stack_high = (uintptr_t)low + size;
            }
            pthread_attr_destroy(&attributes);
        }
    }
    uintptr_t frames[64];
    cstallmon_capture_result result;
    // A self-signal is delivered before tgkill returns unless blocked, so the wait is only a guard.
    cstallmon_capture(index, frames, 64, 50 * 1000000LL, &result);
    return result.status;
}

// MARK: - Diagnostics (NOT async-signal-safe)

int cstallmon_thread_blocks_signal(pid_t tid, int signal_number) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)tid);
    FILE *file = fopen(path, "re");
    if (!file) return -1;
    char line[256];
    int answer = -1;
    while (fgets(line, sizeof line, file)) {
        unsigned long long mask = 0;
        if (sscanf(line, "SigBlk: %llx", &mask) == 1) {
            answer = (mask >> (signal_number - 1)) & 1ULL ? 1 : 0;
            break;
        }
    }
    fclose(file);
    return answer;
}
