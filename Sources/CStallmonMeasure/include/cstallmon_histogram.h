// The busy-time histogram's buckets, shared by the loop's probe (StallmonLoop, through Swift) and the global
// executor's per-worker statistics (CStallmonConcurrency): one definition of the buckets for both writers and for the
// readers. Header-only: everything here is inlined into the writer's hot path.
#ifndef CSTALLMON_HISTOGRAM_H
#define CSTALLMON_HISTOGRAM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Log-linear buckets: values below 32 ns have a bucket each; above, every power of two is split into 16 equal
/// buckets, so a bucket is at most 1/16 of its lower bound wide and its midpoint within 3.2 % of any value in it.
/// The last bucket holds everything from 2^36 ns (68.7 s) up.
enum {
    CSTALLMON_HISTOGRAM_SUB_BITS = 4,
    CSTALLMON_HISTOGRAM_LINEAR = 32,
    CSTALLMON_HISTOGRAM_MAX_EXPONENT = 36,
    CSTALLMON_HISTOGRAM_BUCKETS = 32 + (36 - 5) * 16 + 1,
};

/// The bucket of `nanoseconds`. Async-signal-safe (arithmetic only).
static inline uint32_t cstallmon_histogram_bucket(uint64_t nanoseconds) {
    if (nanoseconds < CSTALLMON_HISTOGRAM_LINEAR) return (uint32_t)nanoseconds;
    uint32_t exponent = 63u - (uint32_t)__builtin_clzll(nanoseconds);
    if (exponent >= CSTALLMON_HISTOGRAM_MAX_EXPONENT) return CSTALLMON_HISTOGRAM_BUCKETS - 1;
    uint32_t mantissa = (uint32_t)(nanoseconds >> (exponent - CSTALLMON_HISTOGRAM_SUB_BITS)) & 15u;
    return CSTALLMON_HISTOGRAM_LINEAR + (exponent - 5u) * 16u + mantissa;
}

/// Counts one value. Only one thread may record into `buckets` (the loop thread), so a relaxed load and store
/// replace a locked read-modify-write; readers on other threads see each count whole (aligned 64-bit accesses).
/// Async-signal-safe.
static inline void cstallmon_histogram_record(uint64_t *buckets, uint64_t nanoseconds) {
    uint64_t *bucket = buckets + cstallmon_histogram_bucket(nanoseconds);
    __atomic_store_n(bucket, __atomic_load_n(bucket, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
}

/// Reads one bucket's count from any thread. Async-signal-safe.
static inline uint64_t cstallmon_histogram_count(const uint64_t *buckets, uint32_t index) {
    return __atomic_load_n(buckets + index, __ATOMIC_RELAXED);
}

#ifdef __cplusplus
}
#endif
#endif
