import CStallmonLoopShims
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Why a `Looper` could not be created.
public struct LooperError: Error, CustomStringConvertible, Sendable {
    public let description: String
}

/// A single-threaded run loop on epoll, with CFRunLoop's activities, observers, sources, timers and modes.
///
/// Sources: file-descriptor readiness (`addReader`, `addWriter`), timers (`schedule(after:)`, `schedule(every:)`),
/// blocks posted from any thread (`perform`), manually signalled sources (`addCustomSource`) and Swift Concurrency
/// jobs (the loop is a `SerialExecutor` and a `TaskExecutor`). The thread that calls `run` becomes the loop thread
/// until `run` returns; every handler and observer runs there.
///
/// Modes (`LooperMode`): every source, timer, observer and posted block belongs to one mode (`.default` unless
/// told otherwise) or to the common modes (`.common`), and the loop runs in one mode at a time. `run(in:...)` runs
/// the loop in a mode, also from inside a callback on the loop thread (a nested run), and says why it returned.
///
/// Observers (`addObserver`) are called for the activities in `LooperActivity`, in `order` then registration
/// order. Dispatching them takes no lock: the loop keeps a snapshot of the observer list and swaps it only when a
/// registration changed, which it learns from one relaxed atomic load.
///
/// Thread-safety: every public method may be called from any thread. Methods that change loop-owned state from
/// another thread hand the change to the loop thread through the posted-block queue (in every mode), so it takes
/// effect on the loop's next pass.
public final class Looper: @unchecked Sendable {
    // @unchecked: the loop-thread state below is only touched on the loop thread (or before `run` starts it);
    // everything shared is atomic or behind a Mutex. Module-internal rather than private because the run pass,
    // timers, sources and observers live in `Looper+….swift` files of their own.

    /// The loop's name, for reports and logs.
    public let name: String

    let epollFD: Int32
    let wakeFD: Int32
    static let wakeToken: UInt64 = .max

    // MARK: - Shared state

    let running = Atomic<Bool>(false)
    let stopRequested = Atomic<Bool>(false)
    let loopThreadHandle = Atomic<UInt>(0)
    let loopThreadIDStorage = Atomic<Int32>(0)
    let currentLabelStorage = Atomic<UInt32>(0)
    /// The id of the mode the innermost run is in.
    let currentModeStorage = Atomic<UInt8>(0)
    /// Bits of the modes in the common set.
    let commonModeMask = Atomic<UInt64>(LooperMode.default.bit)
    let jobs = Mutex<[Job]>([])
    /// Union of the mode masks of the queued jobs (written under `jobs`' lock, read without it).
    let pendingJobModes = Atomic<UInt64>(0)
    let customSignalled = Atomic<Bool>(false)
    let registry = Mutex(Registry())
    let registryVersion = Atomic<UInt64>(1)
    let nextObserverID = Atomic<UInt64>(1)

    // MARK: - Loop-thread state

    var observerSnapshot = ObserverSnapshot()
    var timers: [TimerEntry] = []  // sorted latest first: the soonest timer is `last`
    var timerSequence: UInt64 = 0
    var fdRegistrations: [Int32: FDRegistration] = [:]
    var customSources: [LooperCustomSource] = []
    var readyEvents = [cstallmon_ready_event](repeating: cstallmon_ready_event(), count: 64)
    /// The mode the innermost run is in, and the mode bits active in it (its own, plus `.common`'s when it is in
    /// the common set).
    var runMode: LooperMode = .default
    var activeModes: UInt64 = LooperMode.default.bit | LooperMode.common.bit
    /// Set by the pass when it ran a source, descriptor handler or posted block (`returnAfterSourceHandled`).
    var sourceHandled = false
    /// Nested runs begun so far; a pass that sees it change knows its ready-event buffer was reused.
    var nestedRunCount: UInt64 = 0

    // MARK: - Life cycle

    /// Creates a loop. Throws when the kernel refuses an epoll instance or an eventfd (descriptor exhaustion).
    public init(name: String) throws(LooperError) {
        self.name = name
        // Whether a seccomp filter allows epoll_pwait2 (newer than some filters): probed once, in a child.
        _ = cstallmon_syscall_verdict(Int32(CSTALLMON_SYSCALL_EPOLL_PWAIT2), nil)
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

    /// The loop running on the calling thread: the `Looper` whose `run` is active here, or nil. Unlike
    /// `CFRunLoopGetCurrent` it never creates one: a thread has a loop only while it runs one, and a loop has a
    /// thread only while it runs.
    public static var current: Looper? {
        guard let opaque = cstallmon_loop_current() else { return nil }
        return Unmanaged<Looper>.fromOpaque(opaque).takeUnretainedValue()
    }

    /// True while a thread is inside `run`.
    public var isRunning: Bool { running.load(ordering: .acquiring) }

    /// The kernel thread id of the loop thread while it runs (0 before the first `run`). Stays set after `run`
    /// returns so that a monitor can still name the thread.
    public var threadID: Int32 { loopThreadIDStorage.load(ordering: .acquiring) }

    /// The label of the timer, source or block the loop is running now, `.none` between callouts. One relaxed
    /// atomic load; safe from any thread.
    public var currentLabel: LooperLabel { LooperLabel(id: currentLabelStorage.load(ordering: .relaxed)) }

    /// The mode the loop is running in (the innermost run's, during a nested run), nil while it does not run.
    /// Two relaxed atomic loads; safe from any thread.
    public var currentMode: LooperMode? {
        isRunning ? LooperMode(id: currentModeStorage.load(ordering: .relaxed)) : nil
    }

    /// True on the loop thread while `run` is active.
    public var isOnLoopThread: Bool {
        loopThreadHandle.load(ordering: .relaxed) == UInt(pthread_self())
            && isRunning
    }

    // MARK: - Running

    /// Runs the loop in `.default` on the calling thread until `stop()`. Unlike `run(in:)` it keeps running when
    /// the mode has nothing in it. It is the outermost run: called while the loop already runs (on another thread,
    /// or nested in one of its own callbacks) it traps; nested runs are `run(in:...)`'s.
    public func run() {
        runTopLevel(deadline: nil)
    }

    /// Runs the loop in `.default` until `deadline` or `stop()`, whichever comes first.
    public func run(until deadline: MonotonicInstant) {
        runTopLevel(deadline: deadline.nanoseconds)
    }

    /// Runs the loop in `.default` for `duration` or until `stop()`.
    public func run(for duration: Duration) {
        run(until: MonotonicInstant.now().advanced(by: duration))
    }

    /// Runs the loop in `mode`, as `CFRunLoopRunInMode`, until one of these, checked in this order:
    /// - `stop()` was called: `.stopped` (a stop ends the innermost run only);
    /// - the mode has no timers, sources or posted blocks: `.finished` (checked before the first pass too, then
    ///   nothing ran and no observer was called);
    /// - `returnAfterSourceHandled` is set and a pass ran a custom source, a descriptor handler or a posted block:
    ///   `.handledSource` (timers do not count);
    /// - `duration` (nil: no limit) has passed: `.timedOut`, after at least one pass (`.zero` polls once).
    ///
    /// Called on the loop thread from inside a callback, it runs a nested pass of the loop: observers see `entry`
    /// and `exit` of the nested run, and the stall monitor times the callback's work before the nested run, each
    /// nested pass and the work after it as separate iterations (README, "Run-loop modes"). Called on another thread
    /// while the loop runs, it returns `.runningOnAnotherThread` at once.
    @discardableResult
    public func run(in mode: LooperMode, for duration: Duration? = nil,
                    returnAfterSourceHandled: Bool = false) -> LooperRunResult {
        let deadline = duration.map { MonotonicInstant.now().advanced(by: $0).nanoseconds }
        return runLoop(mode: mode, deadline: deadline, returnAfterSourceHandled: returnAfterSourceHandled,
                       finishWhenEmpty: true)
    }

    /// `run(in:for:returnAfterSourceHandled:)` with a deadline.
    @discardableResult
    public func run(in mode: LooperMode, until deadline: MonotonicInstant,
                    returnAfterSourceHandled: Bool = false) -> LooperRunResult {
        runLoop(mode: mode, deadline: deadline.nanoseconds, returnAfterSourceHandled: returnAfterSourceHandled,
                finishWhenEmpty: true)
    }

    private func runTopLevel(deadline: UInt64?) {
        precondition(!isOnLoopThread, "Looper \(name) is already running; nest a run with run(in:)")
        let result = runLoop(mode: .default, deadline: deadline, returnAfterSourceHandled: false,
                             finishWhenEmpty: false)
        precondition(result != .runningOnAnotherThread, "Looper \(name) is already running on another thread")
    }

    /// Makes the innermost `run` return after the pass in progress, or the next `run` return at once if none is
    /// active. Safe from any thread.
    public func stop() {
        stopRequested.store(true, ordering: .releasing)
        wakeUp()
    }

    /// Wakes the loop from its wait, as CFRunLoopWakeUp. Safe from any thread.
    public func wakeUp() {
        _ = cstallmon_eventfd_signal(wakeFD)
    }

    // MARK: - Modes

    /// Adds `mode` to the common modes: everything added for `.common`, before or after, then also belongs to
    /// `mode`. Safe from any thread; a loop running in `mode` picks the items up on its next pass.
    public func addCommonMode(_ mode: LooperMode) {
        precondition(mode != .common, "`.common` is the set of common modes, not a mode of it")
        commonModeMask.bitwiseOr(mode.bit, ordering: .relaxed)
        wakeUp()
    }

    /// The modes in the common set, `.default` first.
    public var commonModes: [LooperMode] {
        let mask = commonModeMask.load(ordering: .relaxed)
        return (0..<UInt8(63)).filter { mask & (1 << UInt64($0)) != 0 }.map { LooperMode(id: $0) }
    }

    // MARK: - Monitor attachment

    /// Attaches a monitor's probe: the loop then stores every iteration's busy interval into it directly, with
    /// the timestamps it already reads, and calls `bindThread` on the loop thread when it first sees the
    /// attachment and at the start of every outermost run. Safe from any thread.
    package func attach(probe: LoopProbe, bindThread: @escaping @Sendable () -> Void) {
        registry.withLock { $0.attachments.append(Attachment(probe: probe, bindThread: bindThread)) }
        registryVersion.wrappingAdd(1, ordering: .releasing)
        wakeUp()
    }

    /// Detaches `probe`; the loop stops storing into it at its next activity. Safe from any thread.
    package func detach(probe: LoopProbe) {
        registry.withLock { $0.attachments.removeAll { $0.probe === probe } }
        registryVersion.wrappingAdd(1, ordering: .releasing)
    }

    static func errnoText() -> String {
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
