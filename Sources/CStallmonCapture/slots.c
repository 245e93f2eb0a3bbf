// Capture slots (one per monitored thread), the waiting side of a capture, warm-up and diagnostics. NOT
// async-signal-safe: runs on the watchdog and the loop thread outside any handler; every wait is bounded.
#include "capture_state.h"

#include <sys/mman.h>
#include <sys/socket.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

capture_state cstallmon_g_state = {.mutex = PTHREAD_MUTEX_INITIALIZER,
                                   .blocks = {cstallmon_g_state.first_block}};

// MARK: - Clocks, ids and status (async-signal-safe, though never called from the handler)

int64_t cstallmon_socket_peer_uid(int fd) {
    struct ucred credentials;
    socklen_t length = sizeof credentials;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) return -1;
    return (int64_t)credentials.uid;
}

int cstallmon_accept_cloexec(int fd) { return accept4(fd, NULL, NULL, SOCK_CLOEXEC); }

int cstallmon_sigrtmin(void) { return SIGRTMIN; }
int cstallmon_sigrtmax(void) { return SIGRTMAX; }
int cstallmon_installed_signal(void) { return atomic_load(&g_state.signal_number); }

void cstallmon_set_async_job_frames(uintptr_t runner_start, uintptr_t runner_end, uintptr_t resume_call) {
    atomic_store_explicit(&g_state.resume_call, resume_call, memory_order_relaxed);
    atomic_store_explicit(&g_state.runner_start, runner_start, memory_order_relaxed);
    atomic_store_explicit(&g_state.runner_end, runner_end, memory_order_release);
}
int cstallmon_loader_lock_found(void) { return g_state.load_write_lock != NULL; }
int cstallmon_unwinder_uses_image_table(void) {
    return g_state.unwinder_uses_table && !atomic_load(&g_state.through_loader);
}
void cstallmon_set_unwind_through_loader(int enabled) { atomic_store(&g_state.through_loader, enabled != 0); }
int cstallmon_image_table_contains(uintptr_t address) {
    uintptr_t low, high;
    return cstallmon_table_range_of(address, &low, &high);
}

int cstallmon_image_table_check(void) {
    return cstallmon_table_check_loaded_images();
}

// MARK: - Slots (NOT async-signal-safe)

// Async-signal-safe (one syscall). True when thread `tid` of this process has exited: signal 0 only probes.
// A thread that exits takes its pending signals with it, so no late handler can come for its slots.
static int thread_is_gone(pid_t tid) {
    return syscall(SYS_tgkill, getpid(), tid, 0) != 0 && errno == ESRCH;
}

// NOT async-signal-safe (mmap). Call with g_state.mutex held. Maps the next block of slots (zeroed: every slot
// SLOT_FREE) and publishes it; false when all blocks exist or the mapping failed.
static int map_next_block(void) {
    for (int block = 1; block < CSTALLMON_MAX_SLOT_BLOCKS; block++) {
        if (atomic_load_explicit(&g_state.blocks[block], memory_order_relaxed) != NULL) continue;
        void *mapped = mmap(NULL, sizeof(capture_slot) * CSTALLMON_SLOTS_PER_BLOCK, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mapped == MAP_FAILED) return 0;
        atomic_store_explicit(&g_state.blocks[block], (capture_slot *)mapped, memory_order_release);
        return 1;
    }
    return 0;
}

int cstallmon_slot_acquire(pid_t tid) {
    int chosen = -1;
    pthread_mutex_lock(&g_state.mutex);
    for (int index = 0; index < CSTALLMON_MAX_SLOTS; index++) {
        capture_slot *slot = cstallmon_slot_at(index);
        if (slot == NULL) {
            // Every slot is taken (many loops, a large pool, lock holders): another block, then this index is in it.
            if (!map_next_block()) break;
            slot = cstallmon_slot_at(index);
        }
        if (atomic_load(&slot->state) != SLOT_FREE) continue;
        atomic_store(&slot->retired, 0);
        atomic_store(&slot->warmed, 0);
        slot->stack_low = 0;
        slot->stack_high = 0;
        atomic_store_explicit(&slot->thread, 0, memory_order_relaxed);
        atomic_store(&slot->tid, tid);
        atomic_store(&slot->state, SLOT_IDLE);
        chosen = index;
        break;
    }
    pthread_mutex_unlock(&g_state.mutex);
    return chosen;
}

int cstallmon_slots_in_use(void) {
    int used = 0;
    pthread_mutex_lock(&g_state.mutex);
    for (int index = 0; index < CSTALLMON_MAX_SLOTS; index++) {
        const capture_slot *slot = cstallmon_slot_at(index);
        if (slot == NULL) break;
        if (atomic_load(&slot->state) != SLOT_FREE) used++;
    }
    pthread_mutex_unlock(&g_state.mutex);
    return used;
}

int cstallmon_slot_release(int index) {
    capture_slot *slot = cstallmon_slot_at(index);
    if (slot == NULL) return 1;
    int freed = 1;
    pthread_mutex_lock(&g_state.mutex);
    atomic_store(&slot->retired, 1);
    int32_t expected = SLOT_IDLE;
    if (atomic_compare_exchange_strong(&slot->state, &expected, SLOT_FREEING)) {
        finish_freeing(slot);
    }
    // Otherwise a late handler is still owed this slot and frees it when it runs, unless the thread is gone:
    // its pending signal died with it, so nobody else will.
    else if (thread_is_gone(atomic_load(&slot->tid))) {
        finish_freeing(slot);
    } else {
        freed = 0;
    }
    pthread_mutex_unlock(&g_state.mutex);
    return freed;
}

int cstallmon_slot_reap(int index) {
    capture_slot *slot = cstallmon_slot_at(index);
    if (slot == NULL) return 1;
    int free_now = 0;
    pthread_mutex_lock(&g_state.mutex);
    if (atomic_load(&slot->state) == SLOT_FREE) {
        free_now = 1;
    } else if (atomic_load(&slot->retired) && thread_is_gone(atomic_load(&slot->tid))) {
        // Its thread is gone, and with it the signal the late handler was owed.
        const int32_t state = atomic_load(&slot->state);
        int32_t expected = state;
        if (state != SLOT_FREEING && atomic_compare_exchange_strong(&slot->state, &expected, SLOT_FREEING)) {
            finish_freeing(slot);
            free_now = 1;
        }
    }
    pthread_mutex_unlock(&g_state.mutex);
    return free_now;
}

// Async-signal-safe (atomic loads), though only the waiting side calls it. True when another slot of `tid` than
// `self` has a signal in flight or a handler owed: the thread must not be
// signalled again until that handler has run (one handler serves every requested slot of its thread anyway).
static int sibling_pending(const capture_slot *self, pid_t tid) {
    for (int index = 0; index < CSTALLMON_MAX_SLOTS; index++) {
        const capture_slot *other = cstallmon_slot_at(index);
        if (other == NULL) break;
        if (other == self || atomic_load(&other->tid) != tid) continue;
        const int32_t state = atomic_load(&other->state);
        if (state == SLOT_REQUESTED || state == SLOT_RUNNING || state == SLOT_ABANDONED ||
            state == SLOT_ABANDONED_RUNNING) {
            return 1;
        }
    }
    return 0;
}

int cstallmon_slot_is_free(int index) {
    const capture_slot *slot = cstallmon_slot_at(index);
    return slot != NULL && atomic_load(&slot->state) == SLOT_FREE;
}

static void (*_Atomic g_test_hook_after_capture)(int);

void cstallmon_set_test_hook_after_capture(void (*hook)(int)) { atomic_store(&g_test_hook_after_capture, hook); }

// MARK: - Capture (the waiting side; NOT async-signal-safe, bounded)

// What a finished capture found, copied from its slot (state DONE, acquired) into the caller's buffers and result.
// NOT async-signal-safe (the waiting side); never waits.
static void collect_capture(const capture_slot *slot, uintptr_t *frames, uintptr_t *frame_pointers,
                            uint32_t max_frames, cstallmon_capture_result *result) {
    const uint32_t count = slot->frame_count < max_frames ? slot->frame_count : max_frames;
    memcpy(frames, slot->frames, count * sizeof(uintptr_t));
    result->frame_count = count;
    result->job_frame = UINT32_MAX;
    if (frame_pointers != NULL && slot->has_frame_pointers) {
        memcpy(frame_pointers, slot->frame_pointers, count * sizeof(uintptr_t));
        result->has_frame_pointers = 1;
        if (slot->job_frame < count) {
            result->job_frame = slot->job_frame;
            result->job_context = slot->job_context;
        }
    }
    result->recorded_word = slot->recorded_word;
    result->pointed_word = slot->pointed_word;
    result->truncated = slot->truncated;
    result->handler_entered_ns = slot->entered_ns;
    result->handler_done_ns = slot->done_ns;
    result->unknown_image = (uint32_t)slot->unknown_image;
    if (slot->in_loader) {
        result->status = CSTALLMON_CAPTURE_IN_LOADER;
    } else if (slot->unwind_error != 0) {
        result->status = CSTALLMON_CAPTURE_UNWIND_FAILED;
        result->error_number = slot->unwind_error;
    } else {
        result->status = CSTALLMON_CAPTURE_OK;
    }
}

void cstallmon_capture(int index, uintptr_t *frames, uint32_t max_frames, int64_t timeout_ns,
                       cstallmon_capture_result *result) {
    cstallmon_capture_with_frame_pointers(index, frames, NULL, max_frames, timeout_ns, result);
}

void cstallmon_capture_with_frame_pointers(int index, uintptr_t *frames, uintptr_t *frame_pointers,
                                           uint32_t max_frames, int64_t timeout_ns,
                                           cstallmon_capture_result *result) {
    cstallmon_capture_recording_word(index, frames, frame_pointers, max_frames, timeout_ns, 0, 0, result);
}

void cstallmon_capture_recording_word(int index, uintptr_t *frames, uintptr_t *frame_pointers, uint32_t max_frames,
                                      int64_t timeout_ns, uintptr_t word_address, uintptr_t pointed_offset,
                                      cstallmon_capture_result *result) {
    memset(result, 0, sizeof *result);
    result->job_frame = UINT32_MAX;
    const int signal_number = atomic_load(&g_state.signal_number);
    if (cstallmon_slot_at(index) == NULL || signal_number == 0) {
        result->status = CSTALLMON_CAPTURE_NOT_READY;
        return;
    }
    capture_slot *slot = cstallmon_slot_at(index);
    int32_t state = atomic_load(&slot->state);
    if (state == SLOT_ABANDONED || state == SLOT_ABANDONED_RUNNING) {
        // Never re-signal while a handler may still run. A thread that has exited took its pending signal with it,
        // and signal 0 only probes existence.
        if (thread_is_gone(atomic_load(&slot->tid))) {
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
    // Someone (a library, a crash reporter) may have replaced our handler, e.g. with SIG_DFL, whose action for a
    // real-time signal is to terminate the process. Never send it then: one sigaction call, on the watchdog.
    struct sigaction current;
    if (sigaction(signal_number, NULL, &current) != 0 || !(current.sa_flags & SA_SIGINFO) ||
        current.sa_sigaction != sampling_handler) {
        result->status = CSTALLMON_CAPTURE_SIGNAL_FAILED;
        result->error_number = EPERM;
        result->handler_replaced = 1;
        return;
    }
    if (sibling_pending(slot, atomic_load(&slot->tid))) {
        result->status = CSTALLMON_CAPTURE_PENDING;
        return;
    }
    // Objects loaded or unloaded since the last capture: the refresher thread brings the table up to date (a
    // frame in an object it does not know yet ends the stack, marked; the next sample sees it). An object the table
    // lists that was unloaded or replaced (another loaded at its address) is hidden from the handler, which would
    // otherwise read the new object's unwind tables at the old one's offsets: a frame there ends the stack, marked;
    // the refresher is woken at once.
    if (g_state.unwinder_uses_table) {
        const int changed = !cstallmon_table_check_loaded_images();
        // libunwind's caches (register states, the fast trace's frame shapes) are keyed by address: forget what they
        // learned of the replaced code.
        if (changed) unw_flush_cache(unw_local_addr_space, 0, 0);
        cstallmon_table_request_refresh(changed);
    }
    slot->max_frames = max_frames < CSTALLMON_MAX_FRAMES ? max_frames : CSTALLMON_MAX_FRAMES;
    slot->want_frame_pointers = frame_pointers != NULL;
    slot->word_address = word_address;
    slot->pointed_offset = pointed_offset;
    // Cleared here, not only by the handler: a capture that ends before it unwinds (in the loader, say) leaves no
    // earlier capture's word behind.
    slot->recorded_word = 0;
    slot->pointed_word = 0;
    int32_t expected = SLOT_IDLE;
    if (!atomic_compare_exchange_strong(&slot->state, &expected, SLOT_REQUESTED)) {
        result->status = CSTALLMON_CAPTURE_NOT_READY;
        return;
    }
    const pid_t tid = atomic_load(&slot->tid);
    result->signal_sent_ns = cstallmon_clock_monotonic_ns();
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
        const uint64_t now = cstallmon_clock_monotonic_ns();
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
    collect_capture(slot, frames, frame_pointers, max_frames, result);
    void (*hook)(int) = atomic_load(&g_test_hook_after_capture);
    if (hook) hook(index);
    // Back to IDLE, or to FREE if its owner released it while we captured (the release found the slot busy and left
    // it to us; storing IDLE would leak it, IDLE and retired forever).
    settle_slot(slot, SLOT_DONE);
}

uintptr_t cstallmon_slot_thread(int index) {
    const capture_slot *slot = cstallmon_slot_at(index);
    return slot != NULL && atomic_load(&slot->warmed) ? atomic_load_explicit(&slot->thread, memory_order_relaxed) : 0;
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
    capture_slot *warmed = cstallmon_slot_at(index);
    if (warmed != NULL) {
        pthread_attr_t attributes;
        if (pthread_getattr_np(pthread_self(), &attributes) == 0) {
            void *low = NULL;
            size_t size = 0;
            if (pthread_attr_getstack(&attributes, &low, &size) == 0) {
                warmed->stack_low = (uintptr_t)low;
                warmed->stack_high = (uintptr_t)low + size;
            }
            pthread_attr_destroy(&attributes);
        }
    }
    if (warmed != NULL) {
        atomic_store_explicit(&warmed->thread, (uintptr_t)pthread_self(), memory_order_relaxed);
        atomic_store(&warmed->warmed, 1);
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
