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
    uintptr_t resume_call;
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

// The return address of the runtime's call into a task's first partial function (in
// runJobInEstablishedExecutorContext on Swift 6.3, whether a job runner runs the task's job or an actor's drain job
// runs it): found by the layout check, 0 until then.
static _Atomic uintptr_t g_resume_call;
// 0: not checked yet; 1: the drain check found a task's chain in an actor's drain job from the same call; -1: not.
static _Atomic int g_drain_chains;

int cstallmon_worker_await_chain(int index, uint64_t sequence, uintptr_t job_context, uintptr_t job_frame_pointer,
                                 uintptr_t drained_task, uint32_t drained_job_id, uintptr_t *out, uint32_t capacity,
                                 uint32_t *truncated) {
    *truncated = 0;
    if (atomic_load_explicit(&g_layout, memory_order_acquire) != 1 || job_context == 0) return -1;
    uintptr_t task;
    uint32_t attributes;
    if (!cstallmon_worker_job(index, sequence, &task, &attributes)) return -1;
    // An actor's drain job has no task of its own: it runs the tasks queued on the actor, one at a time.
    const bool drain = (attributes & 0xFF) != JOB_KIND_TASK;
    if (drain) {
        if (atomic_load_explicit(&g_drain_chains, memory_order_acquire) != 1 || drained_task == 0) return -1;
        task = drained_task;
    } else if (drained_task != task) {
        // The task the handler found active (with its job id) must be this job's: the id is what tells, after the
        // reads, that the task was not freed in its last job and its memory reused meanwhile. The job's sequence
        // does not: it stays the same until the probe records the job's end, after the task is gone.
        return -1;
    }
    const int count = cstallmon_task_await_chain(task, job_context, job_frame_pointer, out, capacity, truncated);
    // Still the same job after the reads, and still the same task by its job id: it ran throughout, so the callers
    // stayed suspended and their contexts alive; what was read is its chain.
    const bool still = drain ? cstallmon_worker_drain_still_runs_task(index, sequence, task, drained_job_id)
                             : cstallmon_worker_still_runs(index, sequence) &&
                                   cstallmon_task_has_job_id(task, drained_job_id);
    return still ? count : -1;
}

int cstallmon_thread_await_chain(uintptr_t thread, uintptr_t task, uint32_t job_id, uintptr_t job_context,
                                 uintptr_t job_frame_pointer, uintptr_t *out, uint32_t capacity, uint32_t *truncated) {
    *truncated = 0;
    if (atomic_load_explicit(&g_layout, memory_order_acquire) != 1 || task == 0 || job_context == 0) return -1;
    const int count = cstallmon_task_await_chain(task, job_context, job_frame_pointer, out, capacity, truncated);
    // Still that task on that thread after the reads (the caller checks that the loop is still in the same iteration):
    // its callers stayed suspended.
    return count >= 0 && cstallmon_thread_still_runs_task(thread, task, job_id) ? count : -1;
}

int cstallmon_task_await_chain(uintptr_t task, uintptr_t job_context, uintptr_t job_frame_pointer, uintptr_t *out,
                               uint32_t capacity, uint32_t *truncated) {
    const int count = read_chain(job_context, task, out, capacity, truncated);
    // The function the handler found running still runs in its frame (the same context below its frame pointer):
    // had it returned within the job, another function's frame could hold the slot, and its context be freed.
    uintptr_t still = 0;
    if (count < 0 || !read_own(job_frame_pointer - CONTEXT_BELOW_FRAME_POINTER, &still, sizeof still)) return -1;
    return still == job_context ? count : -1;
}

bool cstallmon_concurrency_await_frames(uintptr_t *runner_start, uintptr_t *runner_end, uintptr_t *resume_call) {
    *resume_call = atomic_load_explicit(&g_resume_call, memory_order_acquire);
    cstallmon_job_runner_range(runner_start, runner_end);
    return *resume_call != 0 && atomic_load_explicit(&g_layout, memory_order_acquire) == 1;
}

// Built with frame pointers (clang keeps them in a function that takes its frame's address), so this function's
// frame record holds its caller's: `inner`'s. Its record holds the return address of the runtime's call into it (the
// resume call the handler looks for), and from there the frame records lead through the runtime's frames to the job
// runner that ran this job.
__attribute__((noinline)) void cstallmon_concurrency_await_check_inner(uintptr_t current_task) {
    const uintptr_t inner_frame = *(uintptr_t *)__builtin_frame_address(0);
    uintptr_t frame = inner_frame;
    uintptr_t resume_call = 0;
    bool reaches_runner = false;
    for (int hop = 0; hop < 8 && frame != 0 && (frame & 7) == 0; hop++) {
        uintptr_t record[2];  // the caller's frame pointer, the return address into it
        if (!read_own(frame, record, sizeof record)) break;
        if (hop == 0) resume_call = record[1];
        if (hop > 0 && cstallmon_in_job_runner(record[1])) {
            reaches_runner = true;
            break;
        }
        frame = record[0];
    }
    g_check.count = -1;
    if (!reaches_runner) return;
    uintptr_t context = 0;
    uint32_t truncated;
    if (!read_own(inner_frame - CONTEXT_BELOW_FRAME_POINTER, &context, sizeof context)) return;
    g_check.count = read_chain(context, current_task, g_check.chain, CSTALLMON_MAX_AWAIT_FRAMES, &truncated);
    g_check.resume_call = resume_call;
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
#if !defined(__x86_64__)
    verdict = -1;  // the handler records frame pointers on x86-64 only: no chain could be found elsewhere
#endif
    if (verdict == 1) atomic_store_explicit(&g_resume_call, g_check.resume_call, memory_order_release);
    atomic_store_explicit(&g_layout, verdict, memory_order_release);
    return verdict;
}

__attribute__((noinline)) int cstallmon_concurrency_drain_check(uintptr_t current_task) {
    const int kind = cstallmon_running_job_kind();
    if (kind == -1 || kind == JOB_KIND_TASK) return 0;
    int found = CSTALLMON_DRAIN_SEEN;
    if (cstallmon_current_task_confirm(current_task) > 0) found |= CSTALLMON_DRAIN_ACTIVE_TASK;
    // As the handler finds a job's first frame: the outermost frame the runtime called with the resume call, inside
    // the job runner. Its context must lead to this task's first context.
    const uintptr_t resume_call = atomic_load_explicit(&g_resume_call, memory_order_acquire);
    uintptr_t frame = (uintptr_t)__builtin_frame_address(0);
    uintptr_t called_at_resume = 0;
    bool reaches_runner = false;
    for (int hop = 0; hop < 32 && resume_call != 0 && frame != 0 && (frame & 7) == 0; hop++) {
        uintptr_t record[2];  // the caller's frame pointer, the return address into it
        if (!read_own(frame, record, sizeof record)) break;
        if (cstallmon_in_job_runner(record[1])) {
            reaches_runner = true;
            break;
        }
        if (record[1] == resume_call) called_at_resume = frame;  // this frame is the one called there
        frame = record[0];
    }
    uintptr_t context = 0;
    uint32_t truncated;
    if (reaches_runner && called_at_resume != 0 &&
        read_own(called_at_resume - CONTEXT_BELOW_FRAME_POINTER, &context, sizeof context) &&
        read_chain(context, current_task, g_check.chain, CSTALLMON_MAX_AWAIT_FRAMES, &truncated) > 0) {
        found |= CSTALLMON_DRAIN_CHAIN;
    }
    return found;
}

void cstallmon_concurrency_set_drain_chains(int passed) {
    const bool usable = passed && atomic_load_explicit(&g_layout, memory_order_acquire) == 1;
    atomic_store_explicit(&g_drain_chains, usable ? 1 : -1, memory_order_release);
}

int cstallmon_concurrency_drain_chains(void) {
    return atomic_load_explicit(&g_drain_chains, memory_order_acquire);
}

int cstallmon_concurrency_await_chain_layout(void) {
    return atomic_load_explicit(&g_layout, memory_order_acquire);
}
