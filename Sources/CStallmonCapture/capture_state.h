// Internal to CStallmonCapture: the state shared by the handler (handler.c), installation (install.c) and the
// slot machinery (slots.c). Not part of the module's public header.
#ifndef CSTALLMON_CAPTURE_STATE_H
#define CSTALLMON_CAPTURE_STATE_H

#ifndef _GNU_SOURCE
#error You must define _GNU_SOURCE (Package.swift does)
#endif
#include "CStallmonCapture.h"

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
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

// The smallest alternate signal stack the handler unwinds on (it needs ~8 KiB; the margin covers libunwind paths
// the test's stacks do not take).
#define CSTALLMON_MIN_UNWIND_STACK (16 * 1024)

// Frames above the interrupted program counter that the fast trace also returns (handler, trampoline).
#define CSTALLMON_TRACE_EXTRA 16

typedef struct {
    _Atomic int32_t state;      // futex word: the watchdog sleeps on it, the handler wakes it
    _Atomic pid_t tid;
    _Atomic int32_t retired;    // released by its owner while a late handler may still come
    uint32_t max_frames;        // written by the watchdog before arming, read by the handler
    uint32_t frame_count;       // written by the handler before DONE
    uint32_t want_frame_pointers;   // written by the watchdog before arming: record each frame's RBP too
    uint32_t has_frame_pointers;    // written by the handler before DONE: `frame_pointers` matches `frames`
    uint32_t job_frame;             // with frame pointers: the async job's first frame (UINT32_MAX: none found)
    uintptr_t job_context;          // the async context below that frame's frame pointer, read by the handler
    uintptr_t word_address;         // written by the watchdog before arming: a word to record (0: none)
    uintptr_t pointed_offset;       // written by the watchdog before arming: where, from that word, to read 8 more
    uintptr_t recorded_word;        // written by the handler before DONE: that word, or 0
    uint64_t pointed_word;          // written by the handler before DONE: the 8 bytes it points to (+ offset), or 0
    uintptr_t stack_low;        // the thread's stack bounds, recorded at warm-up (0: unknown)
    uintptr_t stack_high;
    int32_t in_loader;          // the handler found the thread inside the dynamic loader
    int32_t unknown_image;      // the stack reached code in no known image: it ends there
    _Atomic int32_t warmed;     // the thread ran cstallmon_warm_up: libunwind's per-thread trace cache exists
    _Atomic uintptr_t thread;   // its pthread_self(), recorded at warm-up (0: unknown)
    uint32_t truncated;
    int32_t unwind_error;
    uint64_t entered_ns;
    uint64_t done_ns;
    uintptr_t frames[CSTALLMON_MAX_FRAMES];
    // Each frame's RBP as the unwinder restored it: an async function's frame pointer, below which its context is.
    uintptr_t frame_pointers[CSTALLMON_MAX_FRAMES];
    // Scratch of the handler running for this slot's thread (one at a time), here rather than on the signal stack,
    // which may be a small alternate stack set up by someone else (SA_ONSTACK).
    void *trace[CSTALLMON_MAX_FRAMES + CSTALLMON_TRACE_EXTRA];
    unw_cursor_t cursor;
} capture_slot;

// Everything the handler touches, allocated before any signal can arrive.
typedef struct {
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
    // libunwind reads the image table, never the loader (image_table.c): no loader lock in the handler.
    int unwinder_uses_table;
    // Benchmarks and the fault suite only: unwind through the loader as before the table (the old guard applies).
    _Atomic int through_loader;
    // Where an async job's first frame is (cstallmon_set_async_job_frames): the executor's job runners' code, and the
    // return address of the runtime's call into a task's partial function. runner_end 0: not set.
    _Atomic uintptr_t runner_start, runner_end;
    _Atomic uintptr_t resume_call;
    // The capture slots, in blocks: blocks[0] is first_block; a block is published (release) once filled with
    // zeros and never unpublished or freed, so the handler can walk the published ones at any time.
    capture_slot *_Atomic blocks[CSTALLMON_MAX_SLOT_BLOCKS];
    capture_slot first_block[CSTALLMON_SLOTS_PER_BLOCK];
} capture_state;

// Async-signal-safe (atomic loads). The slot at `index`, or NULL when its block was never mapped or `index` is out
// of range.
static inline capture_slot *cstallmon_slot_at(int index) {
    extern capture_state cstallmon_g_state __attribute__((visibility("hidden")));
    if (index < 0 || index >= CSTALLMON_MAX_SLOTS) return NULL;
    capture_slot *block = atomic_load_explicit(&cstallmon_g_state.blocks[index / CSTALLMON_SLOTS_PER_BLOCK],
                                               memory_order_acquire);
    return block ? &block[index % CSTALLMON_SLOTS_PER_BLOCK] : NULL;
}

// Everything the handler touches: static storage (and slot blocks mapped later, never unmapped), so no handler can
// ever point at freed memory. Defined in slots.c.
extern capture_state cstallmon_g_state __attribute__((visibility("hidden")));
#define g_state cstallmon_g_state

// MARK: - The image table (image_table.c)

// NOT async-signal-safe. Rebuilds the table of loaded images when objects were loaded or unloaded since it was
// built (dl_iterate_phdr's dlpi_adds/dlpi_subs). Returns 1 when it was rebuilt, 0 when current, -1 out of memory.
int cstallmon_table_refresh(void) __attribute__((visibility("hidden")));
// NOT async-signal-safe. Starts the thread that refreshes the table on request (once per process); 0 when running.
int cstallmon_table_start_refresher(void) __attribute__((visibility("hidden")));
// NOT async-signal-safe; never waits. Asks the refresher thread to check the table (a capture does, each time; at
// most once per 20 ms unless `urgent`, when the table was found stale).
void cstallmon_table_request_refresh(int urgent) __attribute__((visibility("hidden")));
// NOT async-signal-safe (process_vm_readv; never waits for a lock); for the watchdog before it signals. Compares
// each image of the table with the program headers the loader now has at that address; an image unloaded or
// replaced (another object loaded at its address) since the table was built is hidden from the handler from then
// on (a frame in it ends the stack, marked). Returns 1 when every image still matches (or there is no table), 0 when
// one did not (the table then needs a refresh).
int cstallmon_table_check_loaded_images(void) __attribute__((visibility("hidden")));
// NOT async-signal-safe. Points libunwind.so's reference to dl_iterate_phdr at the table (inside our handler) and
// at the real function (everywhere else). 0 when done, -1 when libunwind's relocations could not be found.
int cstallmon_table_patch_unwinder(void) __attribute__((visibility("hidden")));
// Async-signal-safe (atomics, a thread-local store). Brackets the handler's unwinding: libunwind's dl_iterate_phdr
// serves the table meanwhile, and the table the handler reads is not freed.
void cstallmon_table_enter(void) __attribute__((visibility("hidden")));
void cstallmon_table_exit(void) __attribute__((visibility("hidden")));
// Async-signal-safe (reads of the immutable table). 1 when `address` is in an executable segment of a known image,
// whose bounds it stores in `low` and `high`.
int cstallmon_table_range_of(uintptr_t address, uintptr_t *low, uintptr_t *high)
    __attribute__((visibility("hidden")));

// MARK: - Shared helpers (async-signal-safe)

// Async-signal-safe: one futex syscall.
static inline void futex_wake_all(_Atomic int32_t *word) {
    syscall(SYS_futex, (int32_t *)word, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
}

// Async-signal-safe (atomic stores). Completes the FREEING state its caller won by compare-and-swap: the slot is
// unassigned and may be acquired again.
static inline void finish_freeing(capture_slot *slot) {
    atomic_store(&slot->tid, 0);
    atomic_store(&slot->retired, 0);
    atomic_store(&slot->state, SLOT_FREE);
}

// Async-signal-safe. Moves the slot out of `from` (a state only the caller can leave) to IDLE, or to FREE when its
// owner released it. Returns 0 when the slot was not in `from`. In handler.c.
int cstallmon_settle_slot(capture_slot *slot, int32_t from) __attribute__((visibility("hidden")));
#define settle_slot cstallmon_settle_slot

// Async-signal-safe. settle_slot, then wakes the watchdog waiting on the slot.
void cstallmon_drain_abandoned(capture_slot *slot, int32_t from) __attribute__((visibility("hidden")));
#define drain_abandoned cstallmon_drain_abandoned

// Async-signal-safe: the SA_SIGINFO handler install.c registers for the sampling signal.
void cstallmon_sampling_handler(int signal_number, siginfo_t *info, void *ucontext)
    __attribute__((visibility("hidden")));
#define sampling_handler cstallmon_sampling_handler

#endif
