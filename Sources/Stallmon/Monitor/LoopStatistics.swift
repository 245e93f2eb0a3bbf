import StallmonLoop

/// The shape of all of a loop's iterations, not only its stalls: how many, how busy each was (a histogram), and
/// how much of the wall time the loop was busy. Counted on the loop thread with relaxed atomics; read from any
/// thread.
public struct LoopStatistics: Sendable, Equatable {
    /// Iterations finished.
    public var iterations: UInt64
    /// Busy time of all iterations, the one in progress included.
    public var busyTime: Duration
    /// Wall time covered: since the monitor started, or the span of `since(_:)`.
    public var elapsed: Duration
    /// Busy time of each finished iteration.
    public var busyHistogram: LoopBusyHistogram

    public init(iterations: UInt64 = 0, busyTime: Duration = .zero, elapsed: Duration = .zero,
                busyHistogram: LoopBusyHistogram = LoopBusyHistogram()) {
        self.iterations = iterations
        self.busyTime = busyTime
        self.elapsed = elapsed
        self.busyHistogram = busyHistogram
    }

    /// Busy time ÷ wall time, 0…1 (0 when no time is covered). Node calls it event-loop utilization.
    public var utilization: Double {
        let wall = Double(elapsed.nanosecondsClamped)
        guard wall > 0 else { return 0 }
        return min(1, max(0, Double(busyTime.nanosecondsClamped) / wall))
    }

    /// The figures of the span between `earlier`, a reading of the same monitor, and this one.
    public func since(_ earlier: LoopStatistics) -> LoopStatistics {
        LoopStatistics(iterations: iterations >= earlier.iterations ? iterations - earlier.iterations : 0,
                       busyTime: max(.zero, busyTime - earlier.busyTime),
                       elapsed: max(.zero, elapsed - earlier.elapsed),
                       busyHistogram: busyHistogram.subtracting(earlier.busyHistogram))
    }
}

extension LoopProbe {
    /// The loop's figures since its monitor started, read at `now` (CLOCK_MONOTONIC ns).
    func statistics(at now: UInt64) -> LoopStatistics {
        let since = monitoringSince.load(ordering: .acquiring)
        guard since > 0 else { return LoopStatistics() }
        let (iterations, busy) = busyTime(at: now)
        return LoopStatistics(iterations: iterations, busyTime: .nanoseconds(Int64(clamping: busy)),
                              elapsed: .nanoseconds(Int64(clamping: now > since ? now - since : 0)),
                              busyHistogram: histogram.snapshot())
    }
}
