#ifndef C_STALLMON_MEASURE_H
#define C_STALLMON_MEASURE_H

// What stallmon measures with, for its C targets and for Swift: the clock (`cstallmon_clock.h`, inlined) and the
// busy-time histogram (`cstallmon_histogram.h`, inlined into the writer's hot path), plus the clock as plain calls
// for Swift. A target of its own, so the epoll shim, the capture, the executor and the selector hook share one
// definition of each without depending on one another.

#include <stdint.h>
#include "cstallmon_clock.h"
#include "cstallmon_histogram.h"

#ifdef __cplusplus
extern "C" {
#endif

/// CLOCK_MONOTONIC in nanoseconds, as a call Swift can make. Async-signal-safe.
uint64_t cstallmon_monotonic_ns(void);

/// CLOCK_REALTIME in nanoseconds since the Unix epoch, as a call Swift can make. Async-signal-safe.
uint64_t cstallmon_realtime_ns(void);

/// The CPUs in the calling thread's affinity mask (`sched_getaffinity`, `CPU_COUNT`), or 0 when it cannot be read:
/// what libdispatch sizes Swift Concurrency's pool by. Not async-signal-safe (it may allocate for a large mask).
int cstallmon_affinity_cpu_count(void);

#ifdef __cplusplus
}
#endif
#endif
