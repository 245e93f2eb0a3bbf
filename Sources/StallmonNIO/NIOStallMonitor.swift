#if NIO
import CStallmonLoopShims
import Foundation
import Logging
import NIOCore
import NIOPosix
import Stallmon
@_exported import StallmonLifecycle
import StallmonLoop
import Synchronization

/// Watches every event loop of a SwiftNIO `EventLoopGroup` for stalls: ticks busy for longer than the threshold,
/// in the I/O phase (a `ChannelHandler` callback) as in the task phase (`execute`, scheduled tasks, future
/// callbacks).
///
/// ```swift
/// let monitor = try NIOStallMonitor(group: MultiThreadedEventLoopGroup.singleton,
///                                   configuration: .init(detection: .init(threshold: .milliseconds(100))))
/// monitor.start()
/// ```
///
/// Each loop is a source of the process's one watchdog thread, named after its NIO thread (`NIO-ELT-0-#3`,
/// `NIO-SGLTN-0-#1`). The loop pays
/// two clock reads and a few relaxed stores per tick, taken around the selector's `epoll_wait` (README, "SwiftNIO
/// event loops"); the watchdog samples a stalled loop's stack by signal, and reports, the event log, classes,
/// signatures and rate limits are exactly those of a `Looper` stall, plus the `phase` (`io` / `tasks`).
///
/// Works with any group of `SelectableEventLoop`s on Linux: `MultiThreadedEventLoopGroup(numberOfThreads:)` and
/// `.singleton` (Hummingbird 2's and Vapor 4's default). Not covered: work that is not on an event loop thread, such
/// as `NIOAsyncChannel` consumers and other async code on Swift's cooperative pool.
public final class NIOStallMonitor: Sendable {
    /// The loops being watched, in the group's order.
    public var loopNames: [String] { watches.map(\.watch.name) }
    /// The validated configuration in effect.
    public let configuration: StallMonitorConfiguration

    private let watches: [EventLoopHook]
    private let state = Mutex<(started: Bool, stopped: Bool)>((false, false))

    /// Loops some monitor watches, so a second monitor of the same group is refused rather than stealing the hook.
    private static let monitoredLoops = Mutex<Set<ObjectIdentifier>>([])

    /// Prepares a watch on every loop of `group`: validates `configuration`, takes the sampling signal, and runs a
    /// set-up task on each loop thread (its kernel thread id, the selector hook, the capture binding),
    /// waiting up to `setUpTimeout` for the whole set-up. Call it off the group's loops: from one of them it throws at
    /// once (the set-up needs that loop to go back to its selector, which it cannot while it waits here).
    ///
    /// Throws when a value is invalid, the signal is taken, one of the loops is already watched by another
    /// `NIOStallMonitor`, or a loop did not run its set-up task in time (a group already shut down: NIO then also
    /// prints its own "Cannot schedule tasks" error; or a loop stalled for longer than `setUpTimeout`).
    public init(group: any EventLoopGroup, configuration: StallMonitorConfiguration = StallMonitorConfiguration(),
                logger: Logger = Logger(label: "stallmon"), sinks: [any StallReportSink] = [],
                setUpTimeout: Duration = .seconds(5)) throws(StallMonitorError) {
        var loops: [any EventLoop] = []
        for loop in group.makeIterator() { loops.append(loop) }
        if let current = loops.first(where: { $0.inEventLoop }) {
            throw StallMonitorError(description: """
                NIOStallMonitor cannot be created on one of the group's own event loops (\(current)): its set-up \
                waits for every loop to pass through its selector, which the calling loop cannot do while it \
                waits; create it before the server starts, or from a thread of its own
                """)
        }
        let setUpDeadline = ContinuousClock.now + setUpTimeout
        let identities = loops.map { ObjectIdentifier($0) }
        let clash = Self.monitoredLoops.withLock { monitored -> Bool in
            guard monitored.isDisjoint(with: identities) else { return true }
            monitored.formUnion(identities)
            return false
        }
        if clash {
            throw StallMonitorError(description: "this event loop group is already monitored by another "
                + "NIOStallMonitor; stop that one first")
        }
        var made: [EventLoopHook] = []
        do throws(StallMonitorError) {
            try LoopThreadMonitor.check(configuration, sinks: sinks)
            let threadIDs = try Self.onEachLoop(loops, deadline: setUpDeadline, timeout: setUpTimeout) { _ in
                cstallmon_gettid()
            }
            var names = Set<String>()
            for (loop, tid) in zip(loops, threadIDs) {
                let name = Self.uniqueName(Self.loopName(of: loop, tid: tid), among: &names, tid: tid)
                let watch = try LoopThreadMonitor(name: name, configuration: configuration, logger: logger, sinks: sinks,
                                          sections: [EventLoopPhase.Section()])
                made.append(try EventLoopHook(loop: loop, watch: watch))
            }
            let watchesByLoop = made
            if let first = loops.first, let pause = Self.willInstallHooks.withLock({ $0[ObjectIdentifier(first)] }) {
                pause(loops)
            }
            let installed = try Self.onEachLoop(loops, deadline: setUpDeadline, timeout: setUpTimeout) { index in
                watchesByLoop[index].installOnLoopThread()
            }
            if let failure = installed.first(where: { $0 != 0 }) {
                throw StallMonitorError(description: "cannot install the selector hook on a loop thread: "
                    + String(cString: strerror(failure)))
            }
            for watch in made where !watch.timesOnlyTheSelector {
                logger.warning("""
                    stallmon: the selector descriptor of event loop \(watch.watch.name) was not found (not a NIOPosix \
                    SelectableEventLoop, or NIO's layout changed): every epoll_wait on its thread ends a tick, so a \
                    handler blocked in an epoll_wait of its own is taken for idle time
                    """)
            }
            // The next selector wait after set-up must go through our epoll_wait; if NIO's calls bind elsewhere
            // (NIOPosix linked as a shared library loaded before us), stalls would silently never be seen.
            while made.contains(where: { $0.waitsSeen == 0 }) && ContinuousClock.now < setUpDeadline {
                usleep(1000)
            }
            if let blind = made.first(where: { $0.waitsSeen == 0 }) {
                throw StallMonitorError(description: "the event loop \(blind.watch.name) did not wait through "
                    + "stallmon's epoll_wait within \(setUpTimeout): it stayed busy that long, or its waits bind "
                    + "elsewhere (NIOPosix linked as a shared library?) and it cannot be timed")
            }
        } catch {
            for watch in made {
                watch.close()
                watch.watch.stop()
            }
            Self.monitoredLoops.withLock { $0.subtract(identities) }
            throw error
        }
        self.configuration = configuration
        watches = made
    }

    deinit {
        stop()
    }

    /// The loop thread's name as NIO gave it (`NIO-ELT-0-#100`, `NIO-SGLTN-0-#12`), read by reflection from NIOPosix's
    /// internal `thread.desiredName`; the kernel's copy (`comm`) is cut at 15 characters, so `#100` and `#10` would
    /// be one name. Falls back to `comm`, then to the thread id.
    static func loopName(of loop: any EventLoop, tid: Int32) -> String {
        if let desired = Mirror(reflecting: loop).descendant("thread", "desiredName") as? String?, let desired,
           !desired.isEmpty {
            return desired
        }
        let kernelName = threadName(of: tid)
        return kernelName.isEmpty ? "NIO-tid-\(tid)" : kernelName
    }

    /// `name`, or `name (tid N)` when another loop of this monitor has that name already: reports and
    /// `statisticsByLoop` are keyed by it.
    static func uniqueName(_ name: String, among names: inout Set<String>, tid: Int32) -> String {
        let unique = names.contains(name) ? "\(name) (tid \(tid))" : name
        names.insert(unique)
        return unique
    }

    /// Starts watching every loop (and the sinks). Calling it again, or after `stop()`, does nothing.
    public func start() {
        let shouldStart = state.withLock { state in
            guard !state.started, !state.stopped else { return false }
            state.started = true
            return true
        }
        guard shouldStart else { return }
        for watch in watches { watch.watch.start() }
    }

    /// Stops watching: the hooks stop storing, the loops leave the watchdog (a stall in progress is written as
    /// ongoing), this monitor's reports are written and the sinks no other monitor uses are stopped (up to 2 s
    /// each). Nothing is posted to the loops, so it works on a group already shut down. Blocks while it joins
    /// threads: from async code, call it off the cooperative pool (`StallMonitorService` does). Idempotent.
    public func stop() {
        let shouldStop = state.withLock { state in
            guard !state.stopped else { return false }
            state.stopped = true
            return true
        }
        guard shouldStop else { return }
        for watch in watches { watch.close() }
        for watch in watches { watch.watch.stop() }
        let identities = watches.map { ObjectIdentifier($0.loop) }
        Self.monitoredLoops.withLock { $0.subtract(identities) }
    }

    /// Attaches `key = value` to the tick in progress on the calling event loop (e.g. a request id); if that tick
    /// stalls, its report carries them. Does nothing off the group's loops.
    public func annotate(_ key: String, _ value: String) {
        for watch in watches where watch.loop.inEventLoop {
            watch.watch.annotate(key, value)
            return
        }
    }

    /// Counters per loop, by loop name.
    public var statisticsByLoop: [String: StallMonitorStatistics] {
        Dictionary(watches.map { ($0.watch.name, $0.watch.statistics) }, uniquingKeysWith: { first, _ in first })
    }

    /// For tests: run between the set-up's first phase (thread ids) and the hooks' installation, for the group whose
    /// first loop is the key (tests of other groups run beside them).
    static let willInstallHooks = Mutex<[ObjectIdentifier: @Sendable ([any EventLoop]) -> Void]>([:])

    /// Runs `body` on every loop thread and returns its results in loop order, or throws naming the loops that did
    /// not run it by `deadline` (the set-up's, whose whole length is `timeout`).
    private static func onEachLoop<Result: Sendable>(
        _ loops: [any EventLoop], deadline: ContinuousClock.Instant, timeout: Duration,
        _ body: @escaping @Sendable (Int) -> Result
    ) throws(StallMonitorError) -> [Result] {
        let results = Mutex<[Int: Result]>([:])
        let finished = MonotonicCondition()
        for (index, loop) in loops.enumerated() {
            let task: @Sendable () -> Void = {
                let value = body(index)
                finished.lock()
                results.withLock { $0[index] = value }
                finished.broadcast()
                finished.unlock()
            }
            loop.execute(task)
        }
        let left = deadline - ContinuousClock.now
        let until = cstallmon_monotonic_ns() &+ UInt64(clamping: max(0, left.nanosecondsClamped))
        finished.lock()
        while results.withLock({ $0.count }) < loops.count && finished.wait(until: until) {}
        finished.unlock()
        let collected = results.withLock { $0 }
        guard collected.count == loops.count else {
            let missing = loops.indices.filter { collected[$0] == nil }.map { "\(loops[$0])" }
            throw StallMonitorError(description: "event loop(s) did not run stallmon's set-up task within "
                + "\(timeout) (group shut down, or the loop stalled): \(missing.joined(separator: ", "))")
        }
        return loops.indices.map { collected[$0]! }
    }
}
extension NIOStallMonitor: StallMonitoring {}
#endif
