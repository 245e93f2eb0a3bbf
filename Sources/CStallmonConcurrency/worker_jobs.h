// Internal to CStallmonConcurrency: what the watchdog-side readers (task names in task_names.c, await chains in
// await_chain.c) share with the executor. Not part of the module's public header.
#ifndef CSTALLMON_WORKER_JOBS_H
#define CSTALLMON_WORKER_JOBS_H

#include <CStallmonLoopShims.h>

// In a probe's job attributes: the job is a task created with a name (see the probe's `job`).
#define JOB_NAMED_TASK (1u << 17)
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include <unistd.h>

/// The job probe `index` runs as its job `sequence` (odd) and the job's attributes (kind in the low byte), read
/// consistently: false when the probe has moved on. For the watchdog thread. Async-signal-safe (atomics only).
bool cstallmon_worker_job(int index, uint64_t sequence, uintptr_t *job, uint32_t *attributes)
    __attribute__((visibility("hidden")));

/// Whether probe `index` still runs its job `sequence`: checked after reading the job's memory, so that what was read
/// belonged to a job that ran throughout. Async-signal-safe (atomics only).
bool cstallmon_worker_still_runs(int index, uint64_t sequence) __attribute__((visibility("hidden")));

/// The pthread_self() of the thread that holds probe `index` (0: none yet). Async-signal-safe (an atomic load).
bool cstallmon_worker_thread(int index, uintptr_t *thread) __attribute__((visibility("hidden")));

/// The kind (low byte of the job's attributes) of the job the calling worker runs now, or -1 when it runs none or is
/// not a watched worker. For the checks, which run on a worker. Async-signal-safe (atomic loads).
int cstallmon_running_job_kind(void) __attribute__((visibility("hidden")));

/// The task that probe `index`'s thread runs right now, read from the runtime's thread-local active task of that
/// thread (current_task.c): true and the task, or false when none or the check has not passed. For a job that is
/// not a task itself (an actor's drain job). Async-signal-safe (process_vm_readv and atomics).
bool cstallmon_worker_current_task(int index, uintptr_t *task) __attribute__((visibility("hidden")));

/// Whether `thread` (a pthread_self()) still runs `task`, and `task`'s memory still is the task whose job id is
/// `job_id`: checked after reading a task's memory through what a capture recorded (its active task and that task's
/// id, of one moment), so that what was read belonged to that task, not to a new one at a freed task's address.
/// Async-signal-safe (process_vm_readv and atomics).
bool cstallmon_thread_still_runs_task(uintptr_t thread, uintptr_t task, uint32_t job_id)
    __attribute__((visibility("hidden")));

/// The same for probe `index`'s drain job `sequence`: it still runs, and its thread still runs that task of that id.
/// Async-signal-safe (process_vm_readv and atomics).
bool cstallmon_worker_drain_still_runs_task(int index, uint64_t sequence, uintptr_t task, uint32_t job_id)
    __attribute__((visibility("hidden")));

/// Whether `task`'s memory still is the task whose job id (`Job::Id`) is `job_id`: a task is freed in its own last
/// job, and its address may be reused at once. Async-signal-safe (process_vm_readv).
bool cstallmon_task_has_job_id(uintptr_t task, uint32_t job_id) __attribute__((visibility("hidden")));

/// The id of the task `job` is (`swift_task_getJobTaskId`, a runtime call). For a job the caller knows to be alive;
/// not for a signal handler.
uint64_t cstallmon_job_task_id(uintptr_t job) __attribute__((visibility("hidden")));

/// The await chain of `task`, which the caller knows to be running; what the worker and loop readers build on (also
/// exported for the benchmark: CStallmonConcurrencyTesting). NOT async-signal-safe.
int cstallmon_task_await_chain(uintptr_t task, uintptr_t job_context, uintptr_t job_frame_pointer, uintptr_t *out,
                               uint32_t capacity, uint32_t *truncated);

/// The install's compare-and-swaps on three variables the caller names (exported for the tests:
/// CStallmonConcurrencyTesting). Async-signal-safe.
int cstallmon_concurrency_swap_hooks(void **global, void **delay, void **deadline, unsigned *ever_set);

/// Whether `address` (a return address) lies in one of the executor's job runners, which call swift_job_run.
/// Async-signal-safe.
bool cstallmon_in_job_runner(uintptr_t address) __attribute__((visibility("hidden")));

/// The job runners' code: [start, end). Async-signal-safe.
void cstallmon_job_runner_range(uintptr_t *start, uintptr_t *end) __attribute__((visibility("hidden")));

/// Copies `length` bytes at `address` of this process with process_vm_readv, which fails instead of faulting on
/// memory freed or unmapped meanwhile. Async-signal-safe (one system call).
static inline bool read_own(uintptr_t address, void *buffer, size_t length) {
    if (address == 0) return false;
    struct iovec local = {.iov_base = buffer, .iov_len = length};
    struct iovec remote = {.iov_base = (void *)address, .iov_len = length};
    return cstallmon_vm_readv(&local, 1, &remote, 1) == (long)length;
}

#endif
