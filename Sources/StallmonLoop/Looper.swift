// Why ~580 lines in one file: the run pass, the timer heap, fd and custom sources and the posted-block queue share
// the loop's private, loop-thread-only state; splitting them into extensions would make that state internal to the
// module. It splits with the run-loop modes and the executor, which reshape that state.
import CStallmonLoopShims
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Why a `Looper` could not be created.
public struct LooperError: Error, CustomStringConvertible, Sendable {
    public let description: String
}

/// A single-threaded run loop on epoll, with CFRunLoop-style observers.
///
/// Sources: file-descriptor readiness (`addReader`, `addWriter`), timers (`schedule(after:)`, `schedule(every:)`),
/// blocks posted from any thread (`perform`), and manually signalled sources (`addCustomSource`). The thread that
/// calls `run` becomes the loop thread until `run` returns; every handler and observer runs there.
///
/// Observers (`addObserver`) are called for the activities in `LooperActivity`, in `order` then registration
/// order. Dispatching them takes no lock: the loop keeps a snapshot of the observer list and swaps it only when a
/// registration changed, which it learns from one relaxed atomic load.
///
/// Thread-safety: every public method may be called from any thread. Methods that change loop-owned state from
/// another thread hand the change to the loop thread through the posted-block queue, so it takes effect on the
/// loop's next pass.
public final class Looper: @unchecked Sendable {
    // @unchecked: the `Loop-thread state` section below is only touched on the loop thread (or before `run` starts
    // it); everything shared is atomic or behind a Mutex.

    /// The loop's name, for reports and logs.
    public let name: String

    private let epollFD: Int32
    private let wakeFD: Int32
    private static let wakeToken: UInt64 = .max

    // MARK: - Shared state

    private let running = Atomic<Bool>(false)
    private let stopRequested = Atomic<Bool>(false)
    private let loopThreadHandle = Atomic<UInt>(0)
    private let loopThreadIDStorage = Atomic<Int32>(0)
    private let currentLabelStorage = Atomic<UInt32>(0)
    private let jobs = Mutex<[Job]>([])
    private let jobsPending = Atomic<Bool>(false)
    private let customSignalled = Atomic<Bool>(false)
    private let observers = Mutex<[ObserverEntry]>([])
    private let observersVersion = Atomic<UInt64>(1)
    private let nextObserverID = Atomic<UInt64>(1)

    // MARK: - Loop-thread state

    private var observerSnapshot = ObserverSnapshot()
    private var timers: [TimerEntry] = []  // sorted latest first: the soonest timer is `last`
    private var timerSequence: UInt64 = 0
    private var fdRegistrations: [Int32: FDRegistration] = [:]
    private var customSources: [LooperCustomSource] = []
    private var readyEvents = [cstallmon_ready_event](repeating: cstallmon_ready_event(), count: 64)

    private struct Job {
        let label: LooperLabel
        let block: @Sendable () -> Void
    }

    private struct TimerEntry {
        var fireAt: UInt64
        var sequence: UInt64
        let timer: LooperTimer
        var latestWake: UInt64 { fireAt &+ UInt64(max(0, timer.tolerance.nanosecondsClamped)) }
    }

    private struct FDRegistration {
        var reader: LooperFDSource?
        var writer: LooperFDSource?
        var events: UInt32 {
            (reader != nil ? UInt32(CSTALLMON_EPOLLIN) | UInt32(CSTALLMON_EPOLLRDHUP) : 0)
                | (writer != nil ? UInt32(CSTALLMON_EPOLLOUT) : 0)
        }
    }

    private struct ObserverSnapshot {
        var version: UInt64 = 0
        var buckets: [[ObserverEntry]] = Array(repeating: [], count: 6)
    }

    // MARK: - Life cycle

    /// Creates a loop. Throws when the kernel refuses an epoll instance or an eventfd (descriptor exhaustion).
    public init(name: String) throws(LooperError) {
        self.name = name
        let epoll = cstallmon_epoll_create()
        guard epoll >= 0 else { throw LooperError(description: "epoll_create1 failed: \(Self.errnoText())") }
        let wake = cstallmon_eventfd_create()
        guard wake >= 0 else {
            close(epoll)
            throw LooperError(description: "eventfd failed: \(Self.errnoText())")
        }
        guard cstallmon_epoll_add(epoll, wake, UInt32(CSTALLMON_EPOLLIN), Self.wakeToken) == 0 else {
            let text = Self.errnoText()
            close(epoll)
            close(wake)
            throw LooperError(description: "epoll_ctl(eventfd) failed: \(text)")
        }
        epollFD = epoll
        wakeFD = wake
    }

    deinit {
        close(epollFD)
        close(wakeFD)
    }

    /// True while a thread is inside `run`.
    public var isRunning: Bool { running.load(ordering: .acquiring) }

    /// The kernel thread id of the loop thread while it runs (0 before the first `run`). Stays set after `run`
    /// returns so that a monitor can still name the thread.
    public var threadID: Int32 { loopThreadIDStorage.load(ordering: .acquiring) }

    /// The label of the timer, source or block the loop is running now, `.none` between callouts. One relaxed
    /// atomic load; safe from any thread.
    public var currentLabel: LooperLabel { LooperLabel(id: currentLabelStorage.load(ordering: .relaxed)) }

    /// True on the loop thread while `run` is active.
    public var isOnLoopThread: Bool {
        loopThreadHandle.load(ordering: .relaxed) == UInt(pthread_self())
            && isRunning
    }

    /// Runs the loop on the calling thread until `stop()`.
    public func run() {
        runLoop(deadline: nil)
    }

    /// Runs the loop until `deadline` or `stop()`, whichever comes first.
    public func run(until deadline: MonotonicInstant) {
        runLoop(deadline: deadline.nanoseconds)
    }

    /// Runs the loop for `duration` or until `stop()`.
    public func run(for duration: Duration) {
        run(until: MonotonicInstant.now().advanced(by: duration))
    }

    /// Makes the current `run` return after the pass in progress, or the next `run` return at once if none is
    /// active. Safe from any thread.
    public func stop() {
        stopRequested.store(true, ordering: .releasing)
        wakeUp()
    }

    /// Wakes the loop from its wait, as CFRunLoopWakeUp. Safe from any thread.
    public func wakeUp() {
        _ = cstallmon_eventfd_signal(wakeFD)
    }

    // MARK: - Posting work

    /// Runs `block` on the loop thread during the next `beforeSources` phase, in posting order. Safe from any thread;
    /// wakes the loop. The label names the block in stall reports.
    public func perform(label: LooperLabel = .perform, _ block: @escaping @Sendable () -> Void) {
        let wasEmpty = jobs.withLock { queue in
            queue.append(Job(label: label, block: block))
            return queue.count == 1
        }
        jobsPending.store(true, ordering: .releasing)
        if wasEmpty && !isOnLoopThread { wakeUp() }
    }

    /// Runs `change` on the loop thread: now if this is the loop thread, else as the next posted block.
    private func onLoopThread(_ change: @escaping @Sendable () -> Void) {
        if isOnLoopThread {
            change()
        } else {
            perform(label: .internal, change)
        }
    }

    // MARK: - Timers

    /// Fires `block` once, `delay` from now, at most `tolerance` late.
    @discardableResult
    public func schedule(after delay: Duration, tolerance: Duration = .zero, label: LooperLabel = .timer,
                         _ block: @escaping @Sendable () -> Void) -> LooperTimer {
        let timer = LooperTimer(label: label, interval: nil, tolerance: tolerance, loop: self, block: block)
        let fireAt = MonotonicInstant.now().advanced(by: delay).nanoseconds
        onLoopThread { [weak self] in self?.insertTimer(TimerEntry(fireAt: fireAt, sequence: 0, timer: timer)) }
        return timer
    }

    /// Fires `block` every `interval`, first after `initialDelay` (default: one interval), at most `tolerance` late.
    /// Firings missed while the loop was busy are skipped, not queued up.
    @discardableResult
    public func schedule(every interval: Duration, initialDelay: Duration? = nil, tolerance: Duration = .zero,
                         label: LooperLabel = .timer, _ block: @escaping @Sendable () -> Void) -> LooperTimer {
        precondition(interval > .zero, "a repeating timer needs a positive interval")
        let timer = LooperTimer(label: label, interval: interval, tolerance: tolerance, loop: self, block: block)
        let fireAt = MonotonicInstant.now().advanced(by: initialDelay ?? interval).nanoseconds
        onLoopThread { [weak self] in self?.insertTimer(TimerEntry(fireAt: fireAt, sequence: 0, timer: timer)) }
        return timer
    }

    func removeTimer(_ timer: LooperTimer) {
        onLoopThread { [weak self] in self?.timers.removeAll { $0.timer === timer } }
    }

    private func insertTimer(_ entry: TimerEntry) {
        guard entry.timer.isValid else { return }
        var entry = entry
        timerSequence &+= 1
        entry.sequence = timerSequence
        // Latest first: find the first index whose entry fires earlier than the new one (ties: older fires first).
        var low = 0
        var high = timers.count
        while low < high {
            let mid = (low + high) / 2
            let other = timers[mid]
            if other.fireAt > entry.fireAt || (other.fireAt == entry.fireAt && other.sequence > entry.sequence) {
                low = mid + 1
            } else {
                high = mid
            }
        }
        timers.insert(entry, at: low)
    }

    /// Fires every timer due at `now`. Returns after at most the timers that were due on entry.
    private func fireDueTimers(now: UInt64) {
        var due = 0
        for entry in timers.reversed() {
            guard entry.fireAt <= now else { break }
            due += 1
        }
        guard due > 0 else { return }
        let firing = timers.suffix(due).reversed().map { $0 }
        timers.removeLast(due)
        for entry in firing where entry.timer.isValid {
            let timer = entry.timer
            currentLabelStorage.store(timer.label.id, ordering: .relaxed)
            if let interval = timer.interval {
                let period = UInt64(max(1, interval.nanosecondsClamped))
                var next = entry.fireAt &+ period
                if next <= now { next = now &+ period - ((now - entry.fireAt) % period) }  // skip missed firings
                insertTimer(TimerEntry(fireAt: next, sequence: 0, timer: timer))
            } else {
                timer.invalidateAfterFiring()
            }
            timer.block()
        }
        currentLabelStorage.store(0, ordering: .relaxed)
    }

    /// The latest time the loop may sleep until without firing a timer later than its tolerance allows.
    private func nextTimerWake() -> UInt64? {
        guard let soonest = timers.last else { return nil }
        var wake = soonest.latestWake
        for entry in timers.reversed() {
            if entry.fireAt >= wake { break }  // sorted by fire time: nothing later can lower the wake time
            wake = min(wake, entry.latestWake)
        }
        return wake
    }

    // MARK: - File descriptors

    /// Calls `handler` on the loop thread whenever `fileDescriptor` is readable (or at end of file / error).
    @discardableResult
    public func addReader(_ fileDescriptor: Int32, label: LooperLabel = .fileDescriptor,
                          _ handler: @escaping @Sendable () -> Void) -> LooperFDSource {
        addFDSource(LooperFDSource(fileDescriptor: fileDescriptor, interest: .read, label: label, loop: self,
                                   handler: handler))
    }

    /// Calls `handler` on the loop thread whenever `fileDescriptor` is writable.
    @discardableResult
    public func addWriter(_ fileDescriptor: Int32, label: LooperLabel = .fileDescriptor,
                          _ handler: @escaping @Sendable () -> Void) -> LooperFDSource {
        addFDSource(LooperFDSource(fileDescriptor: fileDescriptor, interest: .write, label: label, loop: self,
                                   handler: handler))
    }

    private func addFDSource(_ source: LooperFDSource) -> LooperFDSource {
        onLoopThread { [weak self] in
            guard let self, source.isValid else { return }
            let fd = source.fileDescriptor
            let existing = fdRegistrations[fd]
            var registration = existing ?? FDRegistration()
            switch source.interest {
            case .read: registration.reader = source
            case .write: registration.writer = source
            }
            let rc = existing == nil
                ? cstallmon_epoll_add(epollFD, fd, registration.events, UInt64(UInt32(bitPattern: fd)))
                : cstallmon_epoll_modify(epollFD, fd, registration.events, UInt64(UInt32(bitPattern: fd)))
            if rc == 0 {
                fdRegistrations[fd] = registration
            } else {
                source.cancel()  // e.g. a regular file, which epoll refuses (EPERM), or a closed descriptor
            }
        }
        return source
    }

    func removeFDSource(_ source: LooperFDSource) {
        onLoopThread { [weak self] in
            guard let self else { return }
            let fd = source.fileDescriptor
            guard var registration = fdRegistrations[fd] else { return }
            if registration.reader === source { registration.reader = nil }
            if registration.writer === source { registration.writer = nil }
            if registration.reader == nil && registration.writer == nil {
                _ = cstallmon_epoll_remove(epollFD, fd)
                fdRegistrations[fd] = nil
            } else {
                _ = cstallmon_epoll_modify(epollFD, fd, registration.events, UInt64(UInt32(bitPattern: fd)))
                fdRegistrations[fd] = registration
            }
        }
    }

    // MARK: - Custom sources

    /// Adds a manually signalled source; call `signal()` on the result to have `handler` run on the loop thread.
    @discardableResult
    public func addCustomSource(label: LooperLabel = .customSource,
                                _ handler: @escaping @Sendable () -> Void) -> LooperCustomSource {
        let source = LooperCustomSource(label: label, loop: self, handler: handler)
        onLoopThread { [weak self] in
            if source.isValid { self?.customSources.append(source) }
        }
        return source
    }

    func customSourceSignalled() {
        customSignalled.store(true, ordering: .releasing)
        if !isOnLoopThread { wakeUp() }
    }

    func removeCustomSource(_ source: LooperCustomSource) {
        onLoopThread { [weak self] in self?.customSources.removeAll { $0 === source } }
    }

    // MARK: - Observers

    /// Registers `callback` for `activities`. Observers run on the loop thread, lowest `order` first, then in
    /// registration order. A `oneShot` observer is removed after its first call. Safe from any thread, including
    /// from inside an observer callback: a registration takes effect at the next activity dispatched, and a removal
    /// immediately (a removed observer is never called again once `removeObserver` has returned on the loop thread).
    @discardableResult
    public func addObserver(for activities: LooperActivity, order: Int = 0, oneShot: Bool = false,
                            _ callback: @escaping @Sendable (LooperActivity, MonotonicInstant) -> Void)
        -> LooperObserverToken
    {
        register(activities: activities, order: order, oneShot: oneShot, callback: .plain(callback))
    }

    /// Registers an observer tied to `owner`'s lifetime: the loop holds `owner` weakly, passes it to each call, and
    /// drops the observer once `owner` has been deallocated, so the callback needs no `[weak self]` and can never
    /// run after its owner died.
    @discardableResult
    public func addObserver<Owner: AnyObject & Sendable>(
        for activities: LooperActivity, order: Int = 0, oneShot: Bool = false, owner: Owner,
        _ callback: @escaping @Sendable (Owner, LooperActivity, MonotonicInstant) -> Void
    ) -> LooperObserverToken {
        register(activities: activities, order: order, oneShot: oneShot, callback: .ownerTied { [weak owner] activity, now in
            guard let owner else { return false }
            callback(owner, activity, now)
            return true
        })
    }

    private func register(activities: LooperActivity, order: Int, oneShot: Bool, callback: ObserverEntry.Callback)
        -> LooperObserverToken
    {
        let id = nextObserverID.wrappingAdd(1, ordering: .relaxed).oldValue
        let entry = ObserverEntry(id: id, activities: activities, order: order, oneShot: oneShot, callback: callback)
        observers.withLock { list in
            let position = list.firstIndex { $0.order > order } ?? list.endIndex
            list.insert(entry, at: position)
        }
        observersVersion.wrappingAdd(1, ordering: .releasing)
        return LooperObserverToken(id: id)
    }

    /// Removes an observer. Safe from any thread and from inside any observer callback; removing twice is harmless.
    public func removeObserver(_ token: LooperObserverToken) {
        observers.withLock { list in
            if let index = list.firstIndex(where: { $0.id == token.id }) {
                list[index].removed.store(true, ordering: .relaxed)
                list.remove(at: index)
            }
        }
        observersVersion.wrappingAdd(1, ordering: .releasing)
    }

    /// Number of registered observers (for tests and diagnostics).
    public var observerCount: Int { observers.withLock { $0.count } }

    private func refreshObserverSnapshot() {
        let version = observersVersion.load(ordering: .acquiring)
        guard version != observerSnapshot.version else { return }
        var buckets: [[ObserverEntry]] = Array(repeating: [], count: 6)
        let list = observers.withLock { $0 }
        for entry in list {
            for activity in LooperActivity.ordered where entry.activities.contains(activity) {
                buckets[activity.bucket].append(entry)
            }
        }
        observerSnapshot = ObserverSnapshot(version: version, buckets: buckets)
    }

    @inline(__always)
    private func hasObservers(_ activity: LooperActivity) -> Bool {
        !observerSnapshot.buckets[activity.bucket].isEmpty
    }

    /// Calls the observers of `activity`. `now` is read only when someone listens.
    @inline(__always)
    private func notify(_ activity: LooperActivity, now: UInt64? = nil) {
        refreshObserverSnapshot()
        let bucket = activity.bucket
        let count = observerSnapshot.buckets[bucket].count
        guard count > 0 else { return }
        let instant = MonotonicInstant(nanoseconds: now ?? cstallmon_loop_monotonic_ns())
        // Index into the snapshot rather than copying the array out, to spare the hot path a retain/release.
        // The snapshot is only replaced by refreshObserverSnapshot, on this thread, between dispatches.
        for index in 0..<count {
            let entry = observerSnapshot.buckets[bucket][index]
            if entry.removed.load(ordering: .relaxed) { continue }
            let alive = entry.call(activity, instant)
            if !alive || entry.oneShot {
                removeObserver(LooperObserverToken(id: entry.id))
            }
        }
    }

    // MARK: - The loop

    private func runLoop(deadline: UInt64?) {
        let wasRunning = running.exchange(true, ordering: .acquiringAndReleasing)
        precondition(!wasRunning, "Looper \(name) is already running")
        loopThreadHandle.store(UInt(pthread_self()), ordering: .relaxed)
        loopThreadIDStorage.store(cstallmon_loop_gettid(), ordering: .releasing)
        defer {
            currentLabelStorage.store(0, ordering: .relaxed)
            stopRequested.store(false, ordering: .relaxed)
            loopThreadHandle.store(0, ordering: .relaxed)
            running.store(false, ordering: .releasing)
        }
        notify(.entry)
        while !stopRequested.load(ordering: .acquiring) {
            if let deadline, cstallmon_loop_monotonic_ns() >= deadline { break }
            runPass(deadline: deadline)
        }
        notify(.exit)
    }

    private func runPass(deadline: UInt64?) {
        var now = cstallmon_loop_monotonic_ns()
        notify(.beforeTimers, now: now)
        fireDueTimers(now: now)

        notify(.beforeSources)
        runPostedJobs()
        runSignalledCustomSources()

        // Sleep only when nothing is pending; otherwise poll the descriptors and come straight back.
        now = cstallmon_loop_monotonic_ns()
        var timeout = waitTimeout(deadline: deadline, now: now)
        let sleeps = timeout != 0
        currentLabelStorage.store(0, ordering: .relaxed)
        if sleeps {
            notify(.beforeWaiting, now: now)
            // A beforeWaiting observer may have posted a block, signalled a source, scheduled a timer or called
            // stop() on this thread, which does not wake the loop: decide again so that the wait cannot sleep
            // through it.
            if hasObservers(.beforeWaiting) {
                timeout = waitTimeout(deadline: deadline, now: cstallmon_loop_monotonic_ns())
            }
        }
        let count = waitForEvents(timeoutNanoseconds: timeout)
        if sleeps { notify(.afterWaiting) }
        dispatchReadyDescriptors(count: count)
    }

    /// How long the pass may wait in epoll: 0 (poll) when work is pending or a timer or the deadline is due, -1
    /// when nothing bounds the sleep, else the nanoseconds until the next timer wake or the deadline.
    private func waitTimeout(deadline: UInt64?, now: UInt64) -> Int64 {
        let workPending = jobsPending.load(ordering: .acquiring) || customSignalled.load(ordering: .acquiring)
            || stopRequested.load(ordering: .acquiring)
        if workPending { return 0 }
        var wakeAt = nextTimerWake()
        if let deadline { wakeAt = min(wakeAt ?? deadline, deadline) }
        guard let wakeAt else { return -1 }
        return wakeAt > now ? Int64(clamping: wakeAt - now) : 0
    }

    /// epoll wait, retrying EINTR (our own sampling signal interrupts it even with SA_RESTART) for the time left.
    private func waitForEvents(timeoutNanoseconds: Int64) -> Int {
        let start = timeoutNanoseconds > 0 ? cstallmon_loop_monotonic_ns() : 0
        var remaining = timeoutNanoseconds
        while true {
            let count = readyEvents.withUnsafeMutableBufferPointer { buffer in
                cstallmon_epoll_wait(epollFD, buffer.baseAddress, Int32(buffer.count), remaining)
            }
            if count >= 0 { return Int(count) }
            guard errno == EINTR else { return 0 }
            if timeoutNanoseconds > 0 {
                let elapsed = Int64(clamping: cstallmon_loop_monotonic_ns() - start)
                remaining = max(0, timeoutNanoseconds - elapsed)
            }
        }
    }

    private func dispatchReadyDescriptors(count: Int) {
        for index in 0..<count {
            let event = readyEvents[index]
            if event.token == Self.wakeToken {
                _ = cstallmon_eventfd_drain(wakeFD)
                continue
            }
            let fd = Int32(bitPattern: UInt32(truncatingIfNeeded: event.token))
            guard let registration = fdRegistrations[fd] else { continue }
            let failure = UInt32(CSTALLMON_EPOLLERR) | UInt32(CSTALLMON_EPOLLHUP)
            let readable = UInt32(CSTALLMON_EPOLLIN) | UInt32(CSTALLMON_EPOLLRDHUP) | failure
            if event.events & readable != 0, let reader = registration.reader, reader.isValid {
                currentLabelStorage.store(reader.label.id, ordering: .relaxed)
                reader.handler()
            }
            if event.events & (UInt32(CSTALLMON_EPOLLOUT) | failure) != 0,
               let writer = fdRegistrations[fd]?.writer, writer.isValid
            {
                currentLabelStorage.store(writer.label.id, ordering: .relaxed)
                writer.handler()
            }
        }
        currentLabelStorage.store(0, ordering: .relaxed)
    }

    private func runPostedJobs() {
        guard jobsPending.load(ordering: .acquiring) else { return }
        let batch = jobs.withLock { queue in
            jobsPending.store(false, ordering: .relaxed)
            let taken = queue
            queue.removeAll(keepingCapacity: true)
            return taken
        }
        for job in batch {
            currentLabelStorage.store(job.label.id, ordering: .relaxed)
            job.block()
        }
        currentLabelStorage.store(0, ordering: .relaxed)
    }

    private func runSignalledCustomSources() {
        guard customSignalled.exchange(false, ordering: .acquiring) else { return }
        for source in customSources where source.isValid && source.takePending() {
            currentLabelStorage.store(source.label.id, ordering: .relaxed)
            source.handler()
        }
        currentLabelStorage.store(0, ordering: .relaxed)
    }

    private static func errnoText() -> String {
        String(cString: strerror(errno))
    }
}

extension LooperLabel {
    /// Default label of posted blocks.
    public static let perform = LooperLabel("perform")
    /// Default label of timers.
    public static let timer = LooperLabel("timer")
    /// Default label of file-descriptor sources.
    public static let fileDescriptor = LooperLabel("fd")
    /// Default label of custom sources.
    public static let customSource = LooperLabel("custom-source")
    /// The loop's own bookkeeping (registrations handed over from other threads).
    public static let `internal` = LooperLabel("looper.internal")
}
