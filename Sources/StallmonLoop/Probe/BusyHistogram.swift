import CStallmonLoopShims

/// The loop thread's count of iteration busy times: one 64-bit counter per log-linear bucket (see
/// `LoopBusyHistogram` for the buckets), allocated once, written by the loop thread only with a relaxed load and
/// store, read from any thread with relaxed loads.
package final class BusyHistogram: @unchecked Sendable {
    // @unchecked: the buffer is written by one thread (the loop's) and read by others through the C atomics.
    private let buckets: UnsafeMutablePointer<UInt64>

    package init() {
        buckets = .allocate(capacity: LoopBusyHistogram.bucketCount)
        buckets.initialize(repeating: 0, count: LoopBusyHistogram.bucketCount)
    }

    deinit {
        buckets.deallocate()
    }

    /// Loop thread only.
    @inline(__always)
    package func record(_ nanoseconds: UInt64) {
        cstallmon_histogram_record(buckets, nanoseconds)
    }

    /// The counts so far, read bucket by bucket (each count whole; a count recorded meanwhile may or may not be in).
    package func snapshot() -> LoopBusyHistogram {
        var counts = [UInt64](repeating: 0, count: LoopBusyHistogram.bucketCount)
        for index in 0..<counts.count {
            counts[index] = cstallmon_histogram_count(buckets, UInt32(index))
        }
        return LoopBusyHistogram(counts: counts)
    }
}
