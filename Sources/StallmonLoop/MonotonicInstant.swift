import CStallmonLoopShims

/// A point on CLOCK_MONOTONIC, in nanoseconds. Every time in stallmon's loop and monitor is one of these, so the
/// loop, the watchdog and the capture handler compare readings of one clock.
public struct MonotonicInstant: Comparable, Hashable, Sendable, CustomStringConvertible {
    /// Nanoseconds since an unspecified start (boot).
    public var nanoseconds: UInt64

    @inlinable
    public init(nanoseconds: UInt64) {
        self.nanoseconds = nanoseconds
    }

    /// Reads CLOCK_MONOTONIC (vDSO, no syscall).
    @inlinable
    public static func now() -> MonotonicInstant {
        MonotonicInstant(nanoseconds: cstallmon_monotonic_ns())
    }

    @inlinable
    public static func < (lhs: MonotonicInstant, rhs: MonotonicInstant) -> Bool {
        lhs.nanoseconds < rhs.nanoseconds
    }

    /// `self + duration`, saturating at the ends of the clock.
    public func advanced(by duration: Duration) -> MonotonicInstant {
        let delta = duration.nanosecondsClamped
        if delta >= 0 {
            let (sum, overflow) = nanoseconds.addingReportingOverflow(UInt64(delta))
            return MonotonicInstant(nanoseconds: overflow ? .max : sum)
        }
        let magnitude = UInt64(delta.magnitude)
        return MonotonicInstant(nanoseconds: nanoseconds > magnitude ? nanoseconds - magnitude : 0)
    }

    /// Nanoseconds from `earlier` to `self`, or zero when `earlier` is later.
    @inlinable
    public func nanoseconds(since earlier: MonotonicInstant) -> UInt64 {
        nanoseconds > earlier.nanoseconds ? nanoseconds - earlier.nanoseconds : 0
    }

    public var description: String { "MonotonicInstant(\(nanoseconds)ns)" }
}

extension Duration {
    /// The duration in whole nanoseconds, clamped to Int64.
    public var nanosecondsClamped: Int64 {
        let (seconds, attoseconds) = components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        let (sum, overflow2) = scaled.addingReportingOverflow(attoseconds / 1_000_000_000)
        if overflow2 { return seconds < 0 ? .min : .max }
        return sum
    }

    /// The duration in milliseconds as a floating-point number.
    public var milliseconds: Double {
        Double(nanosecondsClamped) / 1_000_000
    }
}
