import CStallmonLoopShims

/// How long a loop's iterations were busy: a histogram of every iteration's busy time, as Node's
/// `monitorEventLoopDelay` and tokio's poll-time histogram keep it.
///
/// Buckets are log-linear: one per nanosecond below 32 ns, then 16 equal buckets per power of two up to 2^36 ns
/// (68.7 s), and one bucket for everything longer. A value read back (`percentile`) is its bucket's midpoint, within
/// 3.2 % of every busy time counted in that bucket.
public struct LoopBusyHistogram: Sendable, Equatable {
    /// Number of buckets.
    public static let bucketCount = Int(CSTALLMON_HISTOGRAM_BUCKETS)

    /// Count per bucket, `bucketCount` of them.
    public let counts: [UInt64]

    /// An empty histogram.
    public init() {
        counts = [UInt64](repeating: 0, count: Self.bucketCount)
    }

    /// A histogram with these counts (`bucketCount` of them; missing buckets count 0, extra ones are ignored).
    public init(counts: [UInt64]) {
        var all = Array(counts.prefix(Self.bucketCount))
        all += [UInt64](repeating: 0, count: Self.bucketCount - all.count)
        self.counts = all
    }

    /// Iterations counted.
    public var count: UInt64 { counts.reduce(0, &+) }

    /// The busy time below which a `fraction` (0…1) of the iterations fall, as the midpoint of the bucket that
    /// holds it; nil when the histogram is empty.
    public func percentile(_ fraction: Double) -> Duration? {
        let total = count
        guard total > 0 else { return nil }
        let rank = max(1, UInt64((min(max(fraction, 0), 1) * Double(total)).rounded(.up)))
        var seen: UInt64 = 0
        for (index, bucketCount) in counts.enumerated() where bucketCount > 0 {
            seen &+= bucketCount
            if seen >= rank { return .nanoseconds(Int64(clamping: Self.midpoint(ofBucket: index))) }
        }
        return .nanoseconds(Int64(clamping: Self.midpoint(ofBucket: Self.bucketCount - 1)))
    }

    /// The counts added since `earlier` (a snapshot of the same loop taken before).
    public func subtracting(_ earlier: LoopBusyHistogram) -> LoopBusyHistogram {
        LoopBusyHistogram(counts: zip(counts, earlier.counts).map { $0 >= $1 ? $0 - $1 : 0 })
    }

    /// The bucket a busy time of `nanoseconds` is counted in.
    public static func bucket(of nanoseconds: UInt64) -> Int {
        Int(cstallmon_histogram_bucket(nanoseconds))
    }

    /// The smallest busy time, in nanoseconds, counted in bucket `index`.
    public static func lowerBound(ofBucket index: Int) -> UInt64 {
        let linear = Int(CSTALLMON_HISTOGRAM_LINEAR)
        if index < linear { return UInt64(max(0, index)) }
        if index >= bucketCount - 1 { return 1 << UInt64(CSTALLMON_HISTOGRAM_MAX_EXPONENT) }
        let offset = index - linear
        let exponent = UInt64(5 + offset / 16)
        return UInt64(16 + offset % 16) << (exponent - 4)
    }

    /// The midpoint of bucket `index` in nanoseconds (the last, open-ended bucket answers its lower bound).
    public static func midpoint(ofBucket index: Int) -> UInt64 {
        if index >= bucketCount - 1 { return lowerBound(ofBucket: index) }
        let lower = lowerBound(ofBucket: index)
        let upper = lowerBound(ofBucket: index + 1)
        return lower + (upper - lower) / 2
    }
}
