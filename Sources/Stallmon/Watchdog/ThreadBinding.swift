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

    func load() -> Bound? {
        let value = packed.load(ordering: .acquiring)
        guard value != 0 else { return nil }
        let tid = Int32(truncatingIfNeeded: value >> 32)
        let slot = Int32((value >> 8) & 0xFF_FFFF) - 1
        return Bound(tid: tid, slot: slot, warmUpStatus: CaptureStatus(Int32(value & 0xFF)))
    }

    func store(tid: Int32, slot: Int32, warmUpStatus: Int32) {
        let value = UInt64(UInt32(bitPattern: tid)) << 32 | UInt64(UInt32(slot + 1) & 0xFF_FFFF) << 8
            | UInt64(UInt8(truncatingIfNeeded: warmUpStatus))
        packed.store(value, ordering: .releasing)
    }

    func clear() -> Bound? {
        let old = load()
        packed.store(0, ordering: .releasing)
        return old
    }
}
