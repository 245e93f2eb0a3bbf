import CStallmonLoopShims
import Synchronization

// Observers and monitor attachments: registered under a lock from any thread, dispatched from a loop-thread
// snapshot that is rebuilt only when the registry's version moved.
extension Looper {
    /// A monitor's probe and the call that binds its capture to the loop thread.
    struct Attachment {
        let probe: LoopProbe
        let bindThread: @Sendable () -> Void
    }

    struct Registry {
        var observers: [ObserverEntry] = []
        var attachments: [Attachment] = []
    }

    struct ObserverSnapshot {
        var version: UInt64 = 0
        var buckets: [[ObserverEntry]] = Array(repeating: [], count: 6)
        /// Holds the attached probes alive for the unretained references below.
        var attachments: [Attachment] = []
        /// The first attached probe, called without retain or release on the hot path.
        var probe: Unmanaged<LoopProbe>?
        /// Probes of further monitors of the same loop (rare).
        var moreProbes: [Unmanaged<LoopProbe>] = []
    }

    /// Registers `callback` for `activities` of runs in `mode`. Observers run on the loop thread, lowest `order`
    /// first, then in registration order. A `oneShot` observer is removed after its first call. Safe from any
    /// thread, including from inside an observer callback: a registration takes effect at the next activity
    /// dispatched, and a removal immediately (a removed observer is never called again once `removeObserver` has
    /// returned on the loop thread).
    @discardableResult
    public func addObserver(for activities: LooperActivity, order: Int = 0, oneShot: Bool = false,
                            mode: LooperMode = .default,
                            _ callback: @escaping @Sendable (LooperActivity, MonotonicInstant) -> Void)
        -> LooperObserverToken
    {
        register(activities: activities, order: order, oneShot: oneShot, modes: mode.bit, callback: .plain(callback))
    }

    /// Registers an observer tied to `owner`'s lifetime: the loop holds `owner` weakly, passes it to each call, and
    /// drops the observer once `owner` has been deallocated, so the callback needs no `[weak self]` and can never
    /// run after its owner died.
    @discardableResult
    public func addObserver<Owner: AnyObject & Sendable>(
        for activities: LooperActivity, order: Int = 0, oneShot: Bool = false, mode: LooperMode = .default,
        owner: Owner, _ callback: @escaping @Sendable (Owner, LooperActivity, MonotonicInstant) -> Void
    ) -> LooperObserverToken {
        register(activities: activities, order: order, oneShot: oneShot, modes: mode.bit,
                 callback: .ownerTied { [weak owner] activity, now in
                     guard let owner else { return false }
                     callback(owner, activity, now)
                     return true
                 })
    }

    private func register(activities: LooperActivity, order: Int, oneShot: Bool, modes: UInt64,
                          callback: ObserverEntry.Callback) -> LooperObserverToken {
        let id = nextObserverID.wrappingAdd(1, ordering: .relaxed).oldValue
        let entry = ObserverEntry(id: id, activities: activities, order: order, oneShot: oneShot, modes: modes,
                                  callback: callback)
        registry.withLock { registry in
            let position = registry.observers.firstIndex { $0.order > order } ?? registry.observers.endIndex
            registry.observers.insert(entry, at: position)
        }
        registryVersion.wrappingAdd(1, ordering: .releasing)
        return LooperObserverToken(id: id)
    }

    /// Removes an observer. Safe from any thread and from inside any observer callback; removing twice is harmless.
    public func removeObserver(_ token: LooperObserverToken) {
        registry.withLock { registry in
            if let index = registry.observers.firstIndex(where: { $0.id == token.id }) {
                registry.observers[index].removed.store(true, ordering: .relaxed)
                registry.observers.remove(at: index)
            }
        }
        registryVersion.wrappingAdd(1, ordering: .releasing)
    }

    /// Number of registered observers (for tests and diagnostics).
    public var observerCount: Int { registry.withLock { $0.observers.count } }

    /// Loop thread: takes up registrations made since the last look (one relaxed atomic load when there were none)
    /// and binds monitors attached meanwhile to this thread.
    @inline(__always)
    func refreshRegistrySnapshot() {
        let version = registryVersion.load(ordering: .acquiring)
        guard version != observerSnapshot.version else { return }
        rebuildSnapshot(version: version)
    }

    private func rebuildSnapshot(version: UInt64) {
        var buckets: [[ObserverEntry]] = Array(repeating: [], count: 6)
        let (list, attachments) = registry.withLock { ($0.observers, $0.attachments) }
        for entry in list {
            for activity in LooperActivity.ordered where entry.activities.contains(activity) {
                buckets[activity.bucket].append(entry)
            }
        }
        let known = observerSnapshot.attachments
        let probes = attachments.map { Unmanaged.passUnretained($0.probe) }
        observerSnapshot = ObserverSnapshot(version: version, buckets: buckets, attachments: attachments,
                                            probe: probes.first, moreProbes: Array(probes.dropFirst()))
        for attachment in attachments where !known.contains(where: { $0.probe === attachment.probe }) {
            attachment.bindThread()
        }
    }

    /// Calls `body` with each attached probe, without retaining it (the snapshot holds it).
    @inline(__always)
    func forEachProbe(_ body: (LoopProbe) -> Void) {
        guard let first = observerSnapshot.probe else { return }
        first._withUnsafeGuaranteedRef(body)
        if !observerSnapshot.moreProbes.isEmpty {
            for probe in observerSnapshot.moreProbes { probe._withUnsafeGuaranteedRef(body) }
        }
    }

    func forEachAttachment(_ body: (Attachment) -> Void) {
        for attachment in observerSnapshot.attachments { body(attachment) }
    }

    @inline(__always)
    func hasObservers(_ activity: LooperActivity) -> Bool {
        !observerSnapshot.buckets[activity.bucket].isEmpty
    }

    /// Calls the observers of `activity` registered for the active modes. `now` is read only when someone listens.
    @inline(__always)
    func dispatchObservers(_ activity: LooperActivity, now: UInt64?) {
        let bucket = activity.bucket
        guard !observerSnapshot.buckets[bucket].isEmpty else { return }
        let instant = MonotonicInstant(nanoseconds: now ?? cstallmon_monotonic_ns())
        let active = activeModes
        // Index into the snapshot rather than copying the array out, to spare the hot path a retain/release.
        // The snapshot is replaced only by refreshRegistrySnapshot, on this thread: between dispatches, or by a
        // nested run inside a callback, after which the dispatch goes on with the observers ordered after the last
        // one called.
        var version = observerSnapshot.version
        var index = 0
        while index < observerSnapshot.buckets[bucket].count {
            let entry = observerSnapshot.buckets[bucket][index]
            index += 1
            if entry.modes & active == 0 || entry.removed.load(ordering: .relaxed) { continue }
            let alive = entry.call(activity, instant)
            if !alive || entry.oneShot {
                removeObserver(LooperObserverToken(id: entry.id))
            }
            if observerSnapshot.version != version {
                version = observerSnapshot.version
                let list = observerSnapshot.buckets[bucket]
                index = list.firstIndex { $0.order > entry.order || ($0.order == entry.order && $0.id > entry.id) }
                    ?? list.count
            }
        }
    }
}
