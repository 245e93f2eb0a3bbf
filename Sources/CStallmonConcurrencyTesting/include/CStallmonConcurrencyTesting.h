#ifndef C_STALLMON_CONCURRENCY_TESTING_H
#define C_STALLMON_CONCURRENCY_TESTING_H

// What only the tests and the benchmark call of CStallmonConcurrency: its checks' verdicts, the hooks' install order
// on variables of the caller's, the await chain of a task known to run, and the per-job cost of the hooks. Defined in
// CStallmonConcurrency; declared here so the module a service links exports only what the monitor uses.

#include "CStallmonConcurrency.h"
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// The install's compare-and-swaps, in its order, on three variables the caller names (the install passes the
/// runtime's; a test passes its own, where the hooks written are never called). `ever_set`, if not NULL, receives a
/// bit for each variable this call set at some point, even if it was put back: 1 global, 2 delay, 4 deadline.
/// Returns a `cstallmon_hooks_outcome`. Async-signal-safe (compare-and-swaps only).
int cstallmon_concurrency_swap_hooks(void **global, void **delay, void **deadline, unsigned *ever_set);

/// The same for `task`, which the caller knows to be running (the benchmark): no probe. NOT async-signal-safe.
int cstallmon_task_await_chain(uintptr_t task, uintptr_t job_context, uintptr_t job_frame_pointer, uintptr_t *out,
                               uint32_t capacity, uint32_t *truncated);







/// For the benchmark: runs what the hooks add per job (the enqueue stamp; the probe's stamps and stores; the run
/// time and queue delay counted) `iterations` times around an empty job, on a scratch probe and scratch statistics;
/// returns the nanoseconds it took. Not what
/// `swift_task_getJobTaskId` costs (it needs a real job). NOT async-signal-safe (it is timing code, not for handlers).
uint64_t cstallmon_concurrency_measure_stamps(uint64_t iterations);

#ifdef __cplusplus
}
#endif

#endif
