// The await chain of a running task: the functions that awaited the one a worker runs now, read on the watchdog
// thread from the task's async contexts (see CStallmonConcurrency.h, "Await chains").
#ifndef _GNU_SOURCE
#error You must define _GNU_SOURCE
#endif

#include "CStallmonConcurrency.h"
#include "worker_jobs.h"

#include <stdatomic.h>

// Where Swift 6.3 keeps them on 64-bit Linux, none of it a promise of the runtime (hence the check at start, and
// every read a process_vm_readv):
// - an async function's frame keeps its async context just below its frame pointer (LLVM's swiftasync frame
//   layout; what the runtime's own backtracer reads, RuntimeModule/FramePointerUnwinder.swift);
// - a context begins with its caller's context (Parent) and the address where the caller resumes (ResumeParent;
//   no pointer authentication on Linux), and the task's first context has no Parent (swift_task_create);
// - that first context is allocated with the task, right after its header (Task.cpp, `allocation + headerSize`):
//   a chain whose root is not there is not this task's.
_Static_assert(sizeof(void *) == 8, "the offsets below are those of 64-bit platforms");
#define CONTEXT_BELOW_FRAME_POINTER 8
#define CONTEXT_PARENT 0
#define CONTEXT_RESUME_PARENT 1
#define TASK_HEADER_MIN 0x40
#define TASK_HEADER_MAX (64 * 1024)
// How far after its resume point a call from the checker's partial function may lie: they are a few dozen bytes.
#define CHECK_PARTIAL_FUNCTION_SPAN 4096
// Kind byte of a job that is a task (JobKind::Task).
#define JOB_KIND_TASK 0

// 0: not checked yet; 1: the layout gave the checker's resume points; -1: it did not (chains are never read).
static _Atomic int g_layout;

// The check's state, written by one checking task at a time (the monitor's start).
static struct {
    uintptr_t chain[CSTALLMON_MAX_AWAIT_FRAMES];
    int count;
} g_check;

// Follows the contexts from `context`, each one's ResumeParent being where its caller resumes, to the root, which
// must be `task`'s first context. Returns how many resume points were written (at most `capacity`, `truncated`
// set when more were left), or -1 when a read failed or this is no chain of `task`. Async-signal-safe
// (process_vm_readv only).
static int read_chain(uintptr_t context, uintptr_t task, uintptr_t *out, uint32_t capacity, uint32_t *truncated) {
    *truncated = 0;
    uint32_t count = 0;
    // Bounded: a chain is followed to its root even past `capacity` (to check the root), but not forever.
    for (uint32_t hop = 0; hop < 16 * CSTALLMON_MAX_AWAIT_FRAMES; hop++) {
        if (context == 0 || (context & 7) != 0) return -1;
        uintptr_t words[2];
        if (!read_own(context, words, sizeof words)) return -1;
        if (count < capacity) {
            out[count++] = words[CONTEXT_RESUME_PARENT];
        } else {
            *truncated = 1;
        }
        const uintptr_t parent = words[CONTEXT_PARENT];
        if (parent == 0) {
            const bool root_of_task = context >= task + TASK_HEADER_MIN && context < task + TASK_HEADER_MAX;
            return root_of_task ? (int)count : -1;
        }
        if (parent == context) return -1;
        context = parent;
    }
    return -1;
}

// The chain of the async frame among `frame_pointers` whose context leads to `task`'s root, scanning from the
// outermost frame in: the first found is the function the job runs now (frames above it are on the stack already).
static int chain_of_frames(uintptr_t task, const uintptr_t *frame_pointers, uint32_t frame_count, uintptr_t *out,
                           uint32_t capacity, uint32_t *truncated, uint32_t *attached_frame) {
    for (uint32_t index = frame_count; index-- > 0;) {
        const uintptr_t frame_pointer = frame_pointers[index];
        if (frame_pointer < CONTEXT_BELOW_FRAME_POINTER || (frame_pointer & 7) != 0) continue;
        uintptr_t context = 0;
        if (!read_own(frame_pointer - CONTEXT_BELOW_FRAME_POINTER, &context, sizeof context)) continue;
        const int count = read_chain(context, task, out, capacity, truncated);
        if (count >= 0) {
            *attached_frame = index;
            return count;
        }
    }
    return -1;
}

int cstallmon_worker_await_chain(int index, uint64_t sequence, const uintptr_t *frame_pointers,
                                 uint32_t frame_count, uintptr_t *out, uint32_t capacity, uint32_t *truncated,
                                 uint32_t *attached_frame) {
    *truncated = 0;
    if (atomic_load_explicit(&g_layout, memory_order_acquire) != 1) return -1;
    uintptr_t task;
    uint32_t attributes;
    if (!cstallmon_worker_job(index, sequence, &task, &attributes)) return -1;
    if ((attributes & 0xFF) != JOB_KIND_TASK) return -1;  // an actor's drain job has no task of its own
    const int count = chain_of_frames(task, frame_pointers, frame_count, out, capacity, truncated, attached_frame);
    // Still the same job after the reads: it ran throughout, so the awaiting callers stayed suspended and their
    // contexts alive; what was read is its chain.
    return cstallmon_worker_still_runs(index, sequence) ? count : -1;
}

int cstallmon_task_await_chain(uintptr_t task, uintptr_t frame_pointer, uintptr_t *out, uint32_t capacity,
                               uint32_t *truncated) {
    uint32_t attached;
    return chain_of_frames(task, &frame_pointer, 1, out, capacity, truncated, &attached);
}

// Built with frame pointers (the target's cSettings), so this function's frame record holds its caller's: `inner`'s.
__attribute__((noinline)) void cstallmon_concurrency_await_check_inner(uintptr_t current_task) {
    const uintptr_t inner_frame = *(uintptr_t *)__builtin_frame_address(0);
    uint32_t truncated;
    g_check.count = cstallmon_task_await_chain(current_task, inner_frame, g_check.chain,
                                               CSTALLMON_MAX_AWAIT_FRAMES, &truncated);
}

__attribute__((noinline)) int cstallmon_concurrency_await_check_outer(void) {
    const uintptr_t outer_call = (uintptr_t)__builtin_return_address(0);
    int verdict = -1;
    // The chain read in `inner` names where `outer` resumes after awaiting it: the partial function this call
    // comes from.
    for (int index = 0; index < g_check.count && index < 2; index++) {
        const uintptr_t resume_point = g_check.chain[index];
        if (resume_point <= outer_call && outer_call - resume_point < CHECK_PARTIAL_FUNCTION_SPAN) verdict = 1;
    }
    atomic_store_explicit(&g_layout, verdict, memory_order_release);
    return verdict;
}

int cstallmon_concurrency_await_chain_layout(void) {
    return atomic_load_explicit(&g_layout, memory_order_acquire);
}
