import CStallmonConcurrency
import StallmonReport

/// How the watchdog samples a thread, one way for every kind of look: a stalled loop thread or worker
/// (`StallTracker`), a starved pool's culprit (`StarvationTracker`), a snapshot's busy worker (`PoolWorkerSource`) and a
/// lock's holder (`HolderSampler`). What the thread waits on is read first, before the signal (in the handler it is
/// always running, out of its system call); then its stack is taken with the caller's capture (its own slot, or a
/// slot borrowed for a pool worker pinned meanwhile); then the two are put together and the outcome counted. Owned
/// by one watchdog pass at a time; its descriptor cache lasts one stall (`forgetDescriptors`).
package struct ThreadSampler {
    /// What a thread was doing as the watchdog looked, before any signal.
    package struct Look {
        /// Its /proc state letter; nil when it had exited.
        package var state: Character?
        /// The system call it sleeps in, when /proc could say.
        package var call: SystemCall?
        /// What that call waits on.
        package var wait: WaitTarget?
    }

    private var descriptors = DescriptorResolver()
    /// Where captured samples and timeouts are counted (nil: not counted, a holder's look).
    private let counters: MonitorCounters?

    init(counters: MonitorCounters?) {
        self.counters = counters
    }

    /// A sampler that counts nothing (the bench's holder looks).
    package init() {
        counters = nil
    }

    /// Descriptors may name other files from now on (a new stall).
    mutating func forgetDescriptors() {
        descriptors = DescriptorResolver()
    }

    /// What `tid` is doing, before it is signalled.
    package mutating func look(at tid: Int32) -> Look {
        let (state, call, wait) = WaitTarget.current(of: tid, descriptors: &descriptors)
        return Look(state: state, call: call, wait: wait)
    }

    /// One sample of `tid`: its look, then its stack through `capture` (given the look, and this sampler for a
    /// holder's look), the two put together and counted.
    mutating func sample(_ tid: Int32, capture: (Look, inout ThreadSampler) -> RawSample) -> RawSample {
        let look = look(at: tid)
        var sample = capture(look, &self)
        sample.threadState = look.state
        sample.wait = look.wait
        switch sample.status {
        case .ok: counters?.samplesCaptured.wrappingAdd(1, ordering: .relaxed)
        case .timedOut, .pending: counters?.captureTimeouts.wrappingAdd(1, ordering: .relaxed)
        default: break
        }
        return sample
    }

    /// A pool worker's stack, with its job's await chain: the worker pinned so its thread cannot exit meanwhile, on
    /// a slot borrowed from `lender` for the capture; `noSlot` when none is free. nil when the worker is gone
    /// (another thread holds its probe).
    static func capturePinned(_ worker: WorkerReading, lender: SlotLender, noSlot: RawSample?) -> RawSample? {
        guard cstallmon_worker_pin(worker.index, worker.generation) == 1 else { return nil }
        defer { cstallmon_worker_unpin(worker.index) }
        var capturer = lender.borrow(for: worker.tid)
        defer { lender.giveBack(&capturer) }
        return capturer?.capture(labelID: 0, jobOf: worker) ?? noSlot
    }
}
