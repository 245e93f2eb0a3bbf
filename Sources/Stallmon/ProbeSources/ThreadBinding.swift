import StallmonReport
import Synchronization

/// Which thread the monitor captures: set once on the loop thread (at `entry`, after warming up the capture) and
/// read by the watchdog. Packed into one atomic: tid, slot and warm-up status.
final class ThreadBinding: Sendable {
    struct Bound: Equatable {
        var tid: Int32
        var slot: Int32
        var warmUpStatus: CaptureStatus
    }

    private let packed = Atomic<UInt64>(0)
    /// Set by `close()`: the monitor stopped, and no binding may be made after it.
    private static let closed = UInt64.max

    func load() -> Bound? {
        Self.unpack(packed.load(ordering: .acquiring))
    }

    private static func unpack(_ value: UInt64) -> Bound? {
        guard value != 0, value != closed else { return nil }
        let tid = Int32(truncatingIfNeeded: value >> 32)
        let slot = Int32((value >> 8) & 0xFF_FFFF) - 1
        return Bound(tid: tid, slot: slot, warmUpStatus: CaptureStatus(Int32(value & 0xFF)))
    }

    private static func pack(tid: Int32, slot: Int32, warmUpStatus: Int32) -> UInt64 {
        UInt64(UInt32(bitPattern: tid)) << 32 | UInt64(UInt32(slot + 1) & 0xFF_FFFF) << 8
            | UInt64(UInt8(truncatingIfNeeded: warmUpStatus))
    }

    /// Replaces the binding, unless the monitor was closed meanwhile. Returns what it replaced (whose slot the
    /// caller now owns and must release), or nil with `accepted` false when closed (the caller releases its own
    /// new slot). Exactly one party ever gets each slot back: no leak, no double release.
    func replace(tid: Int32, slot: Int32, warmUpStatus: Int32) -> (accepted: Bool, previous: Bound?) {
        let new = Self.pack(tid: tid, slot: slot, warmUpStatus: warmUpStatus)
        var current = packed.load(ordering: .acquiring)
        while true {
            if current == Self.closed { return (false, nil) }
            let (exchanged, original) = packed.compareExchange(expected: current, desired: new,
                                                               ordering: .acquiringAndReleasing)
            if exchanged { return (true, Self.unpack(original)) }
            current = original
        }
    }

    /// Closes the binding for good; returns the binding it held (its slot is the caller's to release).
    func close() -> Bound? {
        Self.unpack(packed.exchange(Self.closed, ordering: .acquiringAndReleasing))
    }
}
