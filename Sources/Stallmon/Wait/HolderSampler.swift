import CStallmonCapture
import StallmonReport

/// One look at the thread that held the lock the loop waited for.
package struct HolderSample: Sendable {
    package var tid: Int32
    /// Its /proc state letter; nil when it had exited.
    package var state: Character?
    /// What it was itself blocked in (`fsync /var/lib/ledger.db`), when it slept in a system call.
    package var waiting: String?
    /// How capturing its stack went; nil when it was not signalled (see `HolderSampler`).
    package var status: CaptureStatus?
    /// Its stack (program counter, then return addresses) when `status` is `.ok`.
    package var frames: [UInt] = []
    /// How long the holder was interrupted (signal sent → handler done), when `status` is `.ok`.
    package var pauseNanoseconds: UInt64 = 0
}

/// Samples the holders of the locks a stalled loop waits for, with the capture machinery the loop's own samples
/// use, on slots borrowed for the stall. Owned by one watchdog thread; never runs on the loop thread.
///
/// A holder is a thread the monitor does not own, so it is signalled only when that cannot change what it does:
/// while it runs, or sleeps in a call `SA_RESTART` resumes (`SystemCall.restartsAfterSignal`). Asleep in another
/// call (`nanosleep`, `poll`), in an uninterruptible wait (`D`, e.g. `fsync`), or blocking the signal, only its
/// system call is recorded. A thread is never signalled while any slot of it has a handler in flight or owed
/// (the C side checks that); a slot released with a handler still owed is kept aside until that handler ran or
/// the thread exited, and at most `maxOwedSlots` are, so a holder that blocks the signal cannot use up the slots.
package final class HolderSampler {
    static let maxOwedSlots = 4

    private let stacks: Bool
    private let lender: SlotLender
    private var borrowed: [Int32: StackCapturer] = [:]
    /// Holders of this stall that block the sampling signal (or whose mask could not be read).
    private var unsignallable: Set<Int32> = []

    package init(maxFrames: Int, timeout: Duration, stacks: Bool) {
        self.stacks = stacks
        lender = SlotLender(maxFrames: maxFrames, timeout: timeout, maxOwedSlots: Self.maxOwedSlots)
    }

    deinit {
        endStall()
    }

    /// Looks at holder `tid` once: its state, its own wait, and its stack when it may be signalled.
    package func sample(_ tid: Int32, sampler: inout ThreadSampler) -> HolderSample {
        let look = sampler.look(at: tid)
        let (state, call) = (look.state, look.call)
        var sample = HolderSample(tid: tid, state: state, waiting: look.wait?.summary)
        // Asleep in a call it could not be told from (nil: /proc could not say): not signalled.
        let signallable = state == "R" || (state == "S" && call?.restartsAfterSignal == true)
        if stacks && signallable, let capturer = capturer(for: tid) {
            let capture = capturer.capture(labelID: 0)
            sample.status = capture.status
            sample.frames = capture.frames
            sample.pauseNanoseconds = capture.pauseNanoseconds
        }
        return sample
    }

    /// The slots borrowed for this stall so far.
    var borrowedSlots: [Int32] { borrowed.values.map(\.slot).sorted() }

    /// Returns the slots borrowed for this stall.
    package func endStall() {
        for capturer in borrowed.values {
            var lent: StackCapturer? = capturer
            lender.giveBack(&lent)
        }
        borrowed = [:]
        unsignallable = []
    }

    private func capturer(for tid: Int32) -> StackCapturer? {
        if let known = borrowed[tid] { return known }
        guard !unsignallable.contains(tid) else { return nil }
        guard cstallmon_thread_blocks_signal(tid, cstallmon_installed_signal()) == 0 else {
            unsignallable.insert(tid)
            return nil
        }
        guard let capturer = lender.borrow(for: tid) else { return nil }
        borrowed[tid] = capturer
        return capturer
    }
}
