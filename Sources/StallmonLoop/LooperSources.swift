import Synchronization

/// A timer on a `Looper`, returned by `Looper.schedule(after:...)` and `Looper.schedule(every:...)`.
public final class LooperTimer: Sendable {
    /// What the timer is called in stall reports.
    public let label: LooperLabel
    /// The repeat interval, or nil for a one-shot timer.
    public let interval: Duration?
    /// How late the loop may fire the timer so that it can wake once for several timers.
    public let tolerance: Duration

    /// The mode the timer fires in.
    public var mode: LooperMode { LooperMode(id: UInt8(modes.trailingZeroBitCount)) }

    let block: @Sendable () -> Void
    let modes: UInt64
    private let cancelled = Atomic<Bool>(false)
    private weak let loop: Looper?

    init(label: LooperLabel, interval: Duration?, tolerance: Duration, modes: UInt64, loop: Looper,
         block: @escaping @Sendable () -> Void) {
        self.label = label
        self.interval = interval
        self.tolerance = tolerance
        self.modes = modes
        self.loop = loop
        self.block = block
    }

    /// Stops the timer. Safe from any thread; once it returns on the loop thread the timer never fires again, and
    /// from another thread it may fire at most once more if it was already due.
    public func cancel() {
        guard !cancelled.exchange(true, ordering: .relaxed) else { return }
        loop?.removeTimer(self)
    }

    /// False once cancelled or, for a one-shot timer, fired.
    public var isValid: Bool { !cancelled.load(ordering: .relaxed) }

    func invalidateAfterFiring() {
        cancelled.store(true, ordering: .relaxed)
    }
}

/// A file-descriptor source on a `Looper`: its handler runs on the loop thread when the descriptor is readable
/// (`addReader`) or writable (`addWriter`). Registered level-triggered: a handler that leaves data unread is
/// called again on the next pass.
public final class LooperFDSource: Sendable {
    /// Readiness a source waits for.
    public enum Interest: Sendable {
        case read
        case write
    }

    /// The descriptor; the loop never closes it.
    public let fileDescriptor: Int32
    public let interest: Interest
    public let label: LooperLabel
    /// The mode the source is handled in.
    public var mode: LooperMode { LooperMode(id: UInt8(modes.trailingZeroBitCount)) }
    let handler: @Sendable () -> Void
    let modes: UInt64
    private let cancelled = Atomic<Bool>(false)
    private weak let loop: Looper?

    init(fileDescriptor: Int32, interest: Interest, label: LooperLabel, modes: UInt64, loop: Looper,
         handler: @escaping @Sendable () -> Void) {
        self.fileDescriptor = fileDescriptor
        self.interest = interest
        self.label = label
        self.modes = modes
        self.loop = loop
        self.handler = handler
    }

    /// Unregisters the source. Call it before closing the descriptor. Safe from any thread.
    public func cancel() {
        guard !cancelled.exchange(true, ordering: .relaxed) else { return }
        loop?.removeFDSource(self)
    }

    public var isValid: Bool { !cancelled.load(ordering: .relaxed) }
}

/// A manually signalled source (CFRunLoop's "source0"): `signal()` from any thread makes its handler run once on
/// the loop thread during the next `beforeSources` phase of a pass in its mode. Several signals before it runs
/// coalesce into one call.
public final class LooperCustomSource: Sendable {
    public let label: LooperLabel
    /// The mode the source runs in.
    public var mode: LooperMode { LooperMode(id: UInt8(modes.trailingZeroBitCount)) }
    let handler: @Sendable () -> Void
    let modes: UInt64
    private let pending = Atomic<Bool>(false)
    private let cancelled = Atomic<Bool>(false)
    private weak let loop: Looper?

    init(label: LooperLabel, modes: UInt64, loop: Looper, handler: @escaping @Sendable () -> Void) {
        self.label = label
        self.modes = modes
        self.loop = loop
        self.handler = handler
    }

    /// Marks the source ready and wakes the loop. Safe from any thread (not from a signal handler).
    public func signal() {
        guard isValid else { return }
        pending.store(true, ordering: .releasing)
        loop?.customSourceSignalled()
    }

    /// Removes the source; a pending signal is dropped. Safe from any thread.
    public func cancel() {
        guard !cancelled.exchange(true, ordering: .relaxed) else { return }
        loop?.removeCustomSource(self)
    }

    public var isValid: Bool { !cancelled.load(ordering: .relaxed) }

    func takePending() -> Bool {
        pending.exchange(false, ordering: .acquiring)
    }
}

/// Identifies an observer registration; pass it to `Looper.removeObserver(_:)`.
public struct LooperObserverToken: Hashable, Sendable {
    let id: UInt64
}

/// One observer registration: a plain callback (called directly, no wrapper on the hot path), or an owner-tied
/// one that answers false once its owner is gone.
final class ObserverEntry: Sendable {
    enum Callback: Sendable {
        case plain(@Sendable (LooperActivity, MonotonicInstant) -> Void)
        case ownerTied(@Sendable (LooperActivity, MonotonicInstant) -> Bool)
    }

    let id: UInt64
    let activities: LooperActivity
    let order: Int
    let oneShot: Bool
    let modes: UInt64
    let callback: Callback
    let removed = Atomic<Bool>(false)

    init(id: UInt64, activities: LooperActivity, order: Int, oneShot: Bool, modes: UInt64, callback: Callback) {
        self.id = id
        self.activities = activities
        self.order = order
        self.oneShot = oneShot
        self.modes = modes
        self.callback = callback
    }

    /// Calls the observer; false when it must be removed (owner gone).
    @inline(__always)
    func call(_ activity: LooperActivity, _ now: MonotonicInstant) -> Bool {
        switch callback {
        case .plain(let body):
            body(activity, now)
            return true
        case .ownerTied(let body):
            return body(activity, now)
        }
    }
}
