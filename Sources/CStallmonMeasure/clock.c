#include "CStallmonMeasure.h"

// Async-signal-safe (clock_gettime).
uint64_t cstallmon_monotonic_ns(void) { return cstallmon_clock_monotonic_ns(); }

// Async-signal-safe (clock_gettime).
uint64_t cstallmon_realtime_ns(void) { return cstallmon_clock_realtime_ns(); }
