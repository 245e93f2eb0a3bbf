// The signal handler and everything it calls: the only code of stallmon that runs inside a signal handler.
// Everything in this file is async-signal-safe: atomics, clock_gettime, syscall(gettid/futex/process_vm_readv),
// getpid and libunwind's local unwinder (unw_step, unw_get_reg) on memory preallocated at install, which finds
// unwind tables in the image table (image_table.c), not through the loader. No malloc, locks of our own, stdio or
// Swift; errno saved and restored.
#include "capture_state.h"

#include <CStallmonLoopShims.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/uio.h>

// Async-signal-safe. Moves the slot out of `from`, a state only the caller can leave (ABANDONED or
// ABANDONED_RUNNING: the late handler; DONE: the watchdog that collected the frames): to FREE when its owner released
// it meanwhile, otherwise to IDLE. Returns 0 when the slot was not in `from`.
int settle_slot(capture_slot *slot, int32_t from) {
    // A released slot goes straight from `from` to FREEING: one transition, so no other party can free and
    // re-acquire it in between (ABA) and have us free a live slot.
    int32_t expected = from;
    if (atomic_load(&slot->retired)) {
        if (!atomic_compare_exchange_strong(&slot->state, &expected, SLOT_FREEING)) return 0;
        finish_freeing(slot);
        return 1;
    }
    if (!atomic_compare_exchange_strong(&slot->state, &expected, SLOT_IDLE)) return 0;
    // Released between the check and the transition: the release saw `from` and left the slot to us. No ABA here:
    // to be re-acquired, the slot must first be freed from IDLE, and only two parties do that. A release comes once
    // per acquisition (the loop's monitor fences its binding), and it already came. A capture's end needs a handler run on
    // the slot's thread: when we are that late handler, ours is running with the signal blocked, so a capture
    // started now times out into ABANDONED; when we are the watchdog, no other capture of this slot runs. So the slot
    // is still this acquisition's when we free it.
    if (atomic_load(&slot->retired)) {
        expected = SLOT_IDLE;
        if (atomic_compare_exchange_strong(&slot->state, &expected, SLOT_FREEING)) finish_freeing(slot);
    }
    return 1;
}

// Async-signal-safe. Returns a slot whose watchdog gave up to IDLE, or to FREE when its owner released it, and
// wakes whoever waits on it.
void drain_abandoned(capture_slot *slot, int32_t from) {
    if (settle_slot(slot, from)) futex_wake_all(&slot->state);
}

// MARK: - The handler (async-signal-safe)

// Async-signal-safe (compares addresses recorded at install).
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

// Async-signal-safe (reads of the image table). Ends the stack at the first frame in code of no known image (JIT
// code, or an object loaded since the table was built): what lies beyond was found by guesswork, not unwind tables.
// Return addresses are looked up at address - 1 (the call), as the symbolicator does.
static void end_at_unknown_image(capture_slot *slot) {
    uintptr_t low = 1, high = 0;  // the segment of the previous frame: most frames share a few images
    for (uint32_t index = 0; index < slot->frame_count; index++) {
        const uintptr_t address = index == 0 ? slot->frames[0] : slot->frames[index] - 1;
        if (address >= low && address < high) continue;
        if (cstallmon_table_range_of(address, &low, &high)) continue;
        slot->unknown_image = 1;
        if (index + 1 < slot->frame_count) slot->truncated = 1;
        slot->frame_count = index + 1;
        return;
    }
}

// Async-signal-safe after the thread's warm-up. libunwind's fast trace (unw_backtrace) walks from the handler's
// own context through the signal trampoline using a per-thread cache of frame shapes, a few times cheaper per frame
// than unw_step. Its per-thread cache is created on the thread's first trace, which cstallmon_warm_up triggers at a
// known point of the monitored thread (not interrupting arbitrary code). The frames above the interrupted program
// counter (the handler, the trampoline) are dropped; if that PC is not found, fall back to unw_step.
static int fast_trace_into(capture_slot *slot, void *ucontext) {
#if defined(__x86_64__)
    enum { EXTRA = CSTALLMON_TRACE_EXTRA };
    void **buffer = slot->trace;
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

// Async-signal-safe (one system call). Copies 8 bytes at `address` of this process with process_vm_readv, which
// fails instead of faulting: 0 when unreadable.
static uint64_t read_word(uintptr_t address) {
    uint64_t word = 0;
    struct iovec local = {.iov_base = &word, .iov_len = sizeof word};
    struct iovec remote = {.iov_base = (void *)address, .iov_len = sizeof word};
    if (address == 0 || cstallmon_vm_readv(&local, 1UL, &remote, 1UL) != (long)sizeof word) {
        return 0;
    }
    return word;
}

// Async-signal-safe (atomic loads, one process_vm_readv of the thread's own stack, which fails instead of faulting).
// For an async job's await chain: the job's first frame (the async function the runtime resumed) is the outermost
// frame inside the outermost job runner that the runtime called with the resume call's return address (in a task's
// job, right under the runner's runtime frames; in an actor's drain job, under the drain's); on a thread without a
// runner (a loop's own executor runs the job), the innermost such frame of the stack, which is the active task's
// also when a nested run of the loop runs a job inside another; and its async context is the word below its frame
// pointer. Read here, while the thread is held in the handler: once it runs on, that
// function may return within the same job and another take its frame (the watchdog then finds a different context
// there).
static void record_job_context(capture_slot *slot) {
    slot->job_frame = UINT32_MAX;
    slot->job_context = 0;
    // `end` first: it is published last (release), so once it is seen, `start` and the call are too.
    const uintptr_t end = atomic_load_explicit(&g_state.runner_end, memory_order_acquire);
    const uintptr_t start = atomic_load_explicit(&g_state.runner_start, memory_order_relaxed);
    const uintptr_t resume_call = atomic_load_explicit(&g_state.resume_call, memory_order_relaxed);
    if (end == 0 || resume_call == 0) return;
    // The outermost runner: a job run inside another job of the same thread is not the one the worker's probe
    // shows (the outer job is). On a thread without one (a loop's executor runs the job), the whole stack, innermost
    // first: the runtime's active task is the innermost job's.
    uint32_t runner = 0;
    for (uint32_t index = slot->frame_count; index-- > 1;) {
        if (slot->frames[index] >= start && slot->frames[index] < end) {
            runner = index;
            break;
        }
    }
    // frames[k] is the return address into frame k, so the frame the runtime called there is k - 1.
    const int innermost_first = runner == 0;
    const uint32_t calls = innermost_first ? slot->frame_count : runner;
    for (uint32_t step = 1; step < calls; step++) {
        const uint32_t call = innermost_first ? step : calls - step;
        if (slot->frames[call] != resume_call) continue;
        const uint32_t first = call - 1;
        const uintptr_t frame_pointer = slot->frame_pointers[first];
        if (frame_pointer < 8 || (frame_pointer & 7) != 0) return;
        const uintptr_t context = (uintptr_t)read_word(frame_pointer - 8);
        if (context == 0) return;
        slot->job_frame = first;
        slot->job_context = context;
        return;
    }
}

// Async-signal-safe (two process_vm_readv). The word the watchdog asked for and the one it points to (a drain job's
// active task, and that task's id), read while the thread is held here: of the same moment as the stack. The task
// cannot be freed meanwhile: a running task is released only by its own thread, after it cleared that word.
static void record_word(capture_slot *slot) {
    slot->recorded_word = 0;
    slot->pointed_word = 0;
    if (slot->word_address == 0) return;
    slot->recorded_word = (uintptr_t)read_word(slot->word_address);
    if (slot->recorded_word != 0) slot->pointed_word = read_word(slot->recorded_word + slot->pointed_offset);
}

// Async-signal-safe: only atomics, clock_gettime, syscall(gettid/futex/process_vm_readv), getpid and libunwind's
// local unwinder, whose unw_init_local2/unw_step/unw_get_reg are documented signal-safe. With the register-state
// cache on (see cstallmon_install) they take libunwind's cache mutex, with all signals blocked, so no holder of it
// can be interrupted by us; the handler never unwinds a thread holding the loader's list lock, which that mutex's
// holder may wait for. That wait cannot deadlock but is not ours to bound: each hold is one frame's lookup by a
// thread of the application unwinding itself, and on a loaded machine a handler queued behind a busy one can outlast
// the capture timeout. The watchdog then counts a timeout and never signals the thread again until the handler
// returned (slots.c).
static void unwind_into(capture_slot *slot, void *ucontext) {
    unw_cursor_t *const cursor = &slot->cursor;
    slot->frame_count = 0;
    slot->truncated = 0;
    slot->unwind_error = 0;
    slot->has_frame_pointers = 0;
    record_word(slot);
    // The fast trace creates its per-thread cache on a thread's first use (mmap, pthread_setspecific): only on a
    // thread that ran warm-up at a known point, never on one borrowed for a moment (a lock's holder). It returns
    // addresses only, so a capture that wants frame pointers (a pool worker's, for its await chain) steps instead.
    const int want_frame_pointers = slot->want_frame_pointers != 0;
    if (!want_frame_pointers && atomic_load(&slot->warmed) && fast_trace_into(slot, ucontext)) return;
    int rc = unw_init_local2(cursor, (unw_context_t *)ucontext, UNW_INIT_SIGNAL_FRAME);
    if (rc < 0) {
        slot->unwind_error = rc;
        return;
    }
    uint32_t count = 0;
    const uint32_t limit = slot->max_frames;
    for (;;) {
        unw_word_t ip = 0;
        if (unw_get_reg(cursor, UNW_REG_IP, &ip) < 0 || ip == 0) break;
        if (count == limit) {
            slot->truncated = 1;
            break;
        }
#if defined(__x86_64__)
        if (want_frame_pointers) {
            unw_word_t frame_pointer = 0;
            unw_get_reg(cursor, UNW_X86_64_RBP, &frame_pointer);
            slot->frame_pointers[count] = (uintptr_t)frame_pointer;
        }
#endif
        slot->frames[count++] = (uintptr_t)ip;
        if (unw_step(cursor) <= 0) break;
    }
    slot->frame_count = count;
#if defined(__x86_64__)
    slot->has_frame_pointers = (uint32_t)want_frame_pointers;
    if (want_frame_pointers) record_job_context(slot);
#endif
}

// Async-signal-safe (one sigaltstack system call). True when this handler runs on an alternate signal stack (we
// install with SA_ONSTACK, so a thread that has one, e.g. set up by a crash reporter, runs us there) smaller than
// what unwinding needs: libunwind's trace takes ~8 KiB of stack (measured by StackCaptureTests), so below
// CSTALLMON_MIN_UNWIND_STACK the sample is skipped rather than risk overflowing it.
static int on_small_alternate_stack(void) {
    stack_t current;
    if (syscall(SYS_sigaltstack, NULL, &current) != 0) return 0;
    return (current.ss_flags & SS_ONSTACK) && current.ss_size < CSTALLMON_MIN_UNWIND_STACK;
}

// Async-signal-safe. errno is saved and restored; nothing allocates, locks or prints. Stack use: its own frame
// (a few hundred bytes; scratch lives in the slot) plus libunwind's, ~8 KiB in all; on an alternate stack smaller
// than CSTALLMON_MIN_UNWIND_STACK it does not unwind.
void sampling_handler(int signal_number, siginfo_t *info, void *ucontext) {
    (void)info;
    const int saved_errno = errno;
    const pid_t self = (pid_t)syscall(SYS_gettid);
    const uint64_t entered = cstallmon_clock_monotonic_ns();
    for (int index = 0; index < CSTALLMON_MAX_SLOTS; index++) {
        capture_slot *slot = cstallmon_slot_at(index);
        if (slot == NULL) break;  // blocks are mapped in order: none after this one
        if (atomic_load(&slot->tid) != self) continue;
        int32_t state = atomic_load(&slot->state);
        if (state == SLOT_REQUESTED) {
            int32_t expected = SLOT_REQUESTED;
            if (!atomic_compare_exchange_strong(&slot->state, &expected, SLOT_RUNNING)) {
                // Drained only if still this thread's: see below.
                if (expected == SLOT_ABANDONED && atomic_load(&slot->tid) == self) {
                    drain_abandoned(slot, SLOT_ABANDONED);
                }
                continue;
            }
            // The slot may have been released and handed to another thread between the tid check above and the
            // swap (this handler serving another slot of its thread meanwhile): that request is not ours. Put it
            // back as its own handler will expect it, REQUESTED, or ABANDONED if its watchdog gave up meanwhile.
            // Its own handler may have come and gone while the slot looked RUNNING, so the owner is signalled again
            // (the handler stays installed for the process's life: an extra signal only finds nothing to do).
            const pid_t owner = atomic_load(&slot->tid);
            if (owner != self) {
                expected = SLOT_RUNNING;
                if (!atomic_compare_exchange_strong(&slot->state, &expected, SLOT_REQUESTED) &&
                    expected == SLOT_ABANDONED_RUNNING) {
                    expected = SLOT_ABANDONED_RUNNING;
                    atomic_compare_exchange_strong(&slot->state, &expected, SLOT_ABANDONED);
                }
                syscall(SYS_tgkill, getpid(), owner, signal_number);
                continue;
            }
            slot->unknown_image = 0;
            // With the image table, unwinding never calls the loader, so a thread inside it (dlopen, dlclose,
            // dl_iterate_phdr) is unwound like any other, with one exception: a thread holding the loader's list
            // lock (when found) is still skipped: it spares dlclose's own thread while it unmaps objects the table
            // may still list. (libunwind's register-state cache mutex, which unwind_into takes, may be held by a
            // thread of the application unwinding with libunwind itself; that thread never waits long for the list
            // lock: image_table.c, iterate_outside_handler.)
            // Without the table (libunwind's relocations not found), the old guard stays whole.
            const int use_table = g_state.unwinder_uses_table && !atomic_load(&g_state.through_loader);
            if (use_table) {
                slot->in_loader = g_state.load_write_lock && loader_lock_held_by(g_state.load_write_lock, self);
            } else {
                slot->in_loader = interrupted_in_loader(slot, (const ucontext_t *)ucontext, self);
            }
            if (slot->in_loader) {
                slot->frame_count = 0;
                slot->truncated = 0;
                slot->unwind_error = 0;
            } else if (on_small_alternate_stack()) {
                slot->frame_count = 0;
                slot->truncated = 0;
                slot->unwind_error = -ENOSPC;  // recorded as unwind-failed: never overflow someone's stack
            } else if (use_table) {
                cstallmon_table_enter();
                unwind_into(slot, ucontext);
                end_at_unknown_image(slot);
                cstallmon_table_exit();
            } else {
                unwind_into(slot, ucontext);
            }
            slot->entered_ns = entered;
            slot->done_ns = cstallmon_clock_monotonic_ns();
            expected = SLOT_RUNNING;
            if (!atomic_compare_exchange_strong(&slot->state, &expected, SLOT_DONE)) {
                drain_abandoned(slot, SLOT_ABANDONED_RUNNING);  // the watchdog stopped waiting meanwhile
            } else {
                futex_wake_all(&slot->state);
            }
        } else if (state == SLOT_ABANDONED && atomic_load(&slot->tid) == self) {
            drain_abandoned(slot, SLOT_ABANDONED);
        }
    }
    errno = saved_errno;
}
