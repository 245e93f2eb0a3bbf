import CStallmonCapture

/// Capture slots borrowed for threads a watchdog does not own a slot of: a lock's holder (`HolderSampler`), a
/// stalled worker of the global executor. A slot returned while a handler may still be owed on it is kept aside
/// until that handler ran or the thread exited (`cstallmon_slot_reap`), and at most `maxOwedSlots` are: a thread
/// that keeps the signal blocked cannot use up the process's slots. Owned by one watchdog thread.
final class SlotLender {
    let maxFrames: Int
    let timeout: Duration
    let maxOwedSlots: Int
    private var owedSlots: [Int32] = []

    init(maxFrames: Int, timeout: Duration, maxOwedSlots: Int) {
        self.maxFrames = maxFrames
        self.timeout = timeout
        self.maxOwedSlots = maxOwedSlots
    }

    /// A capturer on a new slot for `tid`, or nil when too many slots are owed or none is free.
    func borrow(for tid: Int32) -> StackCapturer? {
        owedSlots.removeAll { cstallmon_slot_reap($0) == 1 }
        guard owedSlots.count < maxOwedSlots else { return nil }
        let slot = cstallmon_slot_acquire(tid)
        guard slot >= 0 else { return nil }
        return StackCapturer(slot: slot, maxFrames: maxFrames, timeout: timeout)
    }

    /// Returns the capturer's slot (kept aside while a handler is owed on it) and clears `capturer`.
    func giveBack(_ capturer: inout StackCapturer?) {
        guard let slot = capturer?.slot else { return }
        capturer = nil
        if cstallmon_slot_release(slot) == 0 { owedSlots.append(slot) }
    }
}
