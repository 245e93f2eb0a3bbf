// The clock every C target reads: CLOCK_MONOTONIC (and CLOCK_REALTIME) as nanoseconds, inlined into its caller
// (a signal handler, the selector hook, a pool worker's job stamps). One definition, so that every time stallmon
// compares was read the same way.
#ifndef CSTALLMON_CLOCK_H
#define CSTALLMON_CLOCK_H

#include <stdint.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

/// CLOCK_MONOTONIC in nanoseconds (the vDSO read). Async-signal-safe: clock_gettime is on POSIX's list.
static inline uint64_t cstallmon_clock_monotonic_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000000ULL + (uint64_t)now.tv_nsec;
}

/// CLOCK_REALTIME in nanoseconds since the Unix epoch. Async-signal-safe: clock_gettime is on POSIX's list.
static inline uint64_t cstallmon_clock_realtime_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (uint64_t)now.tv_sec * 1000000000ULL + (uint64_t)now.tv_nsec;
}

#ifdef __cplusplus
}
#endif
#endif
