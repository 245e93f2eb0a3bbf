#define _GNU_SOURCE
#include <sched.h>
#include <stdlib.h>
#include "CStallmonMeasure.h"

// Async-signal-safe (clock_gettime).
uint64_t cstallmon_monotonic_ns(void) { return cstallmon_clock_monotonic_ns(); }

// Async-signal-safe (clock_gettime).
uint64_t cstallmon_realtime_ns(void) { return cstallmon_clock_realtime_ns(); }

// Not async-signal-safe (CPU_ALLOC). A mask too small for the kernel's CPU count fails with EINVAL: retried larger.
int cstallmon_affinity_cpu_count(void) {
    for (int cpus = 1024; cpus <= 1 << 16; cpus *= 4) {
        cpu_set_t *set = CPU_ALLOC(cpus);
        if (set == NULL) return 0;
        size_t size = CPU_ALLOC_SIZE(cpus);
        CPU_ZERO_S(size, set);
        int count = sched_getaffinity(0, size, set) == 0 ? CPU_COUNT_S(size, set) : -1;
        CPU_FREE(set);
        if (count >= 0) return count;
    }
    return 0;
}
