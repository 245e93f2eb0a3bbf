import CStallmonLoopShims
import Synchronization

/// The process's one watchdog thread (`stallmon-watch`), over every monitor's `ProbeSource`: a `Looper`'s loop
/// thread, each event loop of an NIO group, the pool's workers. Each pass checks once for a whole-process freeze,
/// steps every source whose pass is due, answers a snapshot request with every source's parts, exports each source's
/// statistics when due, and sleeps until the earliest wake-up any source asked for (on an eventfd with a nanosecond
/// timeout, so membership changes and `stop` are immediate).
///
/// Monitors hold it from their creation (`retain`, which creates its wake-up eventfd: the one descriptor it needs)
/// to their stop (`release`); their sources are members from `start` to `stop` (`add`, `remove`). The thread runs
/// while any monitor holds it and was started.
final class Watchdog: Sendable {
    /// The process's watchdog.
    static let process = Watchdog()

    /// One of each per process, by construction: they are the watchdog's. Snapshots on demand are answered by its
    /// passes; the hang registry is what its trackers mark; the systemd notifier pings by that registry.
    let snapshots = SnapshotCoordinator()
    let hangs: HangRegistry
    let systemd: SystemdNotifier
    /// The cgroup's CPU limit and throttling, CPU pressure and steal, read for every source's stalls.
    let cpuContention = CPUContention()

    private init() {
        let hangs = HangRegistry()
        self.hangs = hangs
        systemd = SystemdNotifier(hangs: hangs)
    }

    /// Whether the caller is the watchdog thread (a source finished by `stop()` runs on the stopping thread).
    var isCurrentThread: Bool {
        registry.withLock { $0.threadID } == cstallmon_gettid()
    }

    /// One source under watch, with the client and writer its freezes and statistics go to.
    final class Member: Sendable {
        let name: String
        let client: PipelineMember
        let writer: ReportWriter
        /// Used only under `step`'s lock: by the watchdog's passes and by `remove`.
        nonisolated(unsafe) fileprivate let source: any ProbeSource
        fileprivate let step = Mutex<Step>(Step())
        /// Set by `remove`, under the registry's lock: `add` never registers it again (a `start` racing `stop`).
        fileprivate let retired = Atomic<Bool>(false)
        /// The thread whose pass is stepping this source now (0: none): a `remove` from inside that step (a log
        /// handler that stops the monitor) must not wait for the lock its own thread holds.
        fileprivate let steppedBy = Atomic<Int32>(0)
        /// A `remove` from inside a step: the pass stops the source once that step is over.
        fileprivate let removalDeferred = Atomic<Bool>(false)

        /// Read once: each pass takes the smallest, and the configuration is a struct of strings to copy.
        let thresholdNanoseconds: UInt64

        init(source: any ProbeSource, name: String, client: PipelineMember, writer: ReportWriter) {
            self.source = source
            self.name = name
            self.client = client
            self.writer = writer
            thresholdNanoseconds = UInt64(client.configuration.detection.threshold.nanosecondsClamped)
        }
    }

    fileprivate struct Step {
        /// Set by `remove`: no pass touches the source after it.
        var removed = false
        /// When the source asked for its next pass (0: at the next pass).
        var nextWake: UInt64 = 0
        /// Its latest pass watched nothing (a loop thread not bound yet).
        var watchedNothing = true
    }

    private struct Registry {
        var members: [Member] = []
        /// The thread of the monitors that hold the watchdog now; replaced when all released it.
        var runner: StoppableThread?
        var started = false
        var holders = 0
        /// The watchdog thread's id, so that a release on that very thread never joins itself.
        var threadID: Int32 = 0
    }

    private let registry = Mutex<Registry>(Registry())
    /// The freezes found so far, for a source stopped off the watchdog thread (its report sets them aside).
    private let freezesFound = Mutex<FreezeTracker>(FreezeTracker())

    /// A monitor is created: the watchdog's wake-up eventfd is made if no monitor holds it yet. Throws when it
    /// cannot be (EMFILE), and the monitor then refuses to start.
    func retain() throws(FileError) {
        try registry.withLock { registry throws(FileError) in
            if registry.runner == nil {
                let runner = StoppableThread()
                if let failure = runner.creationError { throw failure }
                registry.runner = runner
                registry.started = false
            }
            registry.holders += 1
        }
    }

    /// A monitor stopped (its source was removed): the last one stops and joins the thread.
    func release() {
        let (stopping, ownThread) = registry.withLock { registry -> (StoppableThread?, Bool) in
            registry.holders -= 1
            guard registry.holders == 0 else { return (nil, false) }
            defer {
                registry.runner = nil
                registry.started = false
            }
            return (registry.runner, registry.threadID == cstallmon_gettid())
        }
        // On the watchdog thread itself (a log handler that stops a monitor): it ends at its next pass.
        if ownThread { stopping?.requestStop() } else { stopping?.stop() }
    }

    /// Starts watching `member`'s source: its first pass comes at once. Starts the thread if this is the first
    /// member since the monitors took the watchdog; false when the system refuses a thread.
    func add(_ member: Member) -> Bool {
        let (runner, startNow) = registry.withLock { registry -> (StoppableThread?, Bool) in
            guard !member.retired.load(ordering: .acquiring) else { return (nil, false) }
            registry.members.append(member)
            defer { registry.started = true }
            return (registry.runner, !registry.started)
        }
        guard let runner else { return false }
        if startNow {
            if runner.start(name: "stallmon-watch", { [self] in run(runner) }) { return true }
            // The next monitor's start tries again (and logs it too, if it fails again).
            registry.withLock { registry in if registry.runner === runner { registry.started = false } }
            return false
        }
        runner.wake()
        return true
    }

    /// Stops watching `member`'s source, waiting for a pass that steps it to end: a stall in progress is finished
    /// as ongoing, and no pass touches the source afterwards. Does nothing for a source never added.
    func remove(_ member: Member) {
        let wasMember = registry.withLock { registry in
            member.retired.store(true, ordering: .releasing)
            let count = registry.members.count
            registry.members.removeAll { $0 === member }
            return registry.members.count != count
        }
        guard wasMember else { return }
        if member.steppedBy.load(ordering: .acquiring) == cstallmon_gettid() {
            // From inside this source's own step, on the watchdog thread: the pass stops it right after.
            member.removalDeferred.store(true, ordering: .releasing)
            return
        }
        stop(member)
    }

    /// Finishes `member`'s source (its stall in progress as ongoing); no pass steps it afterwards.
    private func stop(_ member: Member) {
        let freezes = freezesFound.withLock { $0 }
        member.step.withLock { step in
            guard !step.removed else { return }
            step.removed = true
            member.source.stop(freezes: freezes)
        }
    }

    // MARK: - The watchdog thread

    private func run(_ runner: StoppableThread) {
        // Read once: a system call per source and pass would be most of an idle pass's cost.
        let threadID = cstallmon_gettid()
        registry.withLock { $0.threadID = threadID }
        var publishedFreezes = -1  // a new thread publishes its own (empty) record at its first pass
        // This thread's schedstat stays open for the freeze evidence of every pass (one pread, not four calls).
        let ownSchedstat = OwnSchedstat()
        var freezeDetector = FreezeDetector(thresholdNanoseconds: 100_000_000,
                                            progress: { ProcessProgress.read(runDelay: ownSchedstat.runDelay()) })
        let snapshots = snapshots
        var answeredSnapshot: UInt64 = 0
        snapshots.join(ObjectIdentifier(runner), runner: runner)
        defer { snapshots.leave(ObjectIdentifier(runner)) }
        // Made on this thread, as the sources' metrics are (swift-metrics binds a metric to the factory of its making).
        var limitMetrics: CPUContention.Metrics?

        while !runner.isStopping {
            let members = registry.withLock { $0.members }
            if let smallest = members.lazy.map(\.thresholdNanoseconds).min() {
                freezeDetector.setThreshold(nanoseconds: smallest)
            }
            let top = cstallmon_monotonic_ns()
            if let frozen = freezeDetector.passBegins(now: top) { reportFreeze(frozen, to: members) }
            let freezes = freezeDetector.freezes
            // Published for a source stopped off this thread; only when a freeze was added (rarely), not each pass.
            if freezes.count != publishedFreezes {
                publishedFreezes = freezes.count
                freezesFound.withLock { $0 = freezes }
            }
            // A snapshot on demand after each source's pass, so that its captures never delay the pass's reading
            // of `now`.
            let request = snapshots.pending(after: answeredSnapshot)
            var pass = Pass(wakeAt: top &+ Self.idleWake)
            for member in members {
                step(member, pass: &pass, freezes: freezes, snapshot: request != nil, threadID: threadID)
            }
            if pass.watchedSomething {
                var metrics = limitMetrics ?? CPUContention.Metrics(opensAt: top)
                if top >= metrics.nextDue { metrics.record(cpuContention, now: top) }
                pass.wakeAt = min(pass.wakeAt, metrics.nextDue)
                limitMetrics = metrics
            }
            if let request {
                answeredSnapshot = request
                snapshots.contribute(ObjectIdentifier(runner), generation: request, parts: pass.parts)
            }
            if !pass.watchedSomething {
                freezeDetector.skipNextWake()
            } else if let frozen = freezeDetector.passEnds(began: top, waitedOnItsOwnWork: pass.waitedOnItsOwnWork,
                                                        wakeAt: pass.wakeAt) {
                reportFreeze(frozen, to: members)
            }
            runner.wait(until: pass.wakeAt)
        }
    }

    /// How long the thread sleeps when no source asks for an earlier pass.
    private static let idleWake: UInt64 = 1_000_000_000
    /// A source due this soon after the pass's own is stepped in it: sources stepped together ask for their next
    /// passes microseconds apart, and would each wake the thread on its own otherwise. A pass that comes early is
    /// harmless (a busy loop's source asks again for the crossing).
    static let coalescing: UInt64 = 1_000_000

    /// What one pass over every member gathered.
    private struct Pass {
        var wakeAt: UInt64
        var waitedOnItsOwnWork = false
        var watchedSomething = false
        var parts: [SnapshotCoordinator.Part] = []
    }

    /// Steps `member`'s source when its pass is due (at a `now` of its own: the sources before it may have waited
    /// for captures), exports its statistics when due, and adds its snapshot parts when one is asked for.
    private func step(_ member: Member, pass: inout Pass, freezes: FreezeTracker, snapshot: Bool, threadID: Int32) {
        member.steppedBy.store(threadID, ordering: .releasing)
        defer {
            member.steppedBy.store(0, ordering: .releasing)
            if member.removalDeferred.exchange(false, ordering: .acquiringAndReleasing) { stop(member) }
        }
        func work(_ step: inout Step) {
            guard !step.removed else { return }
            let source = member.source
            let now = cstallmon_monotonic_ns()
            if now &+ Self.coalescing >= step.nextWake {
                let sourcePass = source.pass(now: now, freezes: freezes)
                var wakeAt = sourcePass.wakeAt
                if !sourcePass.watchedNothing {
                    if let due = source.statisticsDue, now >= due { source.exportStatistics(now: now) }
                    if let due = source.statisticsDue { wakeAt = min(wakeAt, due) }
                }
                step.nextWake = wakeAt
                step.watchedNothing = sourcePass.watchedNothing
                pass.waitedOnItsOwnWork = pass.waitedOnItsOwnWork || sourcePass.waitedOnItsOwnWork
            }
            if snapshot {
                let (parts, waited) = source.snapshotParts()
                pass.parts += parts
                pass.waitedOnItsOwnWork = pass.waitedOnItsOwnWork || waited
            }
            pass.wakeAt = min(pass.wakeAt, step.nextWake)
            pass.watchedSomething = pass.watchedSomething || !step.watchedNothing
        }
        // Held by a `remove` finishing the source (a pool's stop waits up to 50 ms for a stall's end): this pass then
        // waited on work of its own, and its length says nothing of a freeze.
        if member.step.withLockIfAvailable({ work(&$0) }) == nil {
            pass.waitedOnItsOwnWork = true
            member.step.withLock { work(&$0) }
        }
    }

    /// One freeze of the whole process: counted by every monitor, and one `process.frozen` line per event log,
    /// under the name of the first source that writes to it.
    private func reportFreeze(_ nanoseconds: UInt64, to members: [Member]) {
        var logs = Set<String>()
        for member in members {
            member.client.counters.freezes.wrappingAdd(1, ordering: .relaxed)
            guard logs.insert(member.client.configuration.reports.resolvedEventLogPath).inserted else { continue }
            member.writer.submit(.frozen(loopName: member.name, nanoseconds: nanoseconds), from: member.client)
        }
    }
}
