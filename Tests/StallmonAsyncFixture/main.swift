// A child process for the tests of ConcurrencyStallMonitor: plain Swift Concurrency (tasks, task groups, actors) that
// stalls the global executor's workers in named functions, for real, and prints what each job measured itself.
//
//   stallmon-async-fixture SCENARIO REPORT_DIR [THRESHOLD_MS]
//
// Each line it prints on stdout is `measured NAME MILLISECONDS TID` (what a stalling job measured around its own
// stall) or `error MESSAGE`. Exit status: 0 done, 3 the monitor could not be created (message on stderr).
import CStallmonConcurrency
import CStallmonConcurrencyTesting
import CStallmonLoopShims
import Foundation
import Glibc
import Instrumentation
import Logging
import NIOCore
import NIOPosix
import Stallmon
import StallmonLoop
import StallmonNIO
import Synchronization

let arguments = CommandLine.arguments
guard arguments.count >= 3 else {
    FileHandle.standardError.write(Data("usage: stallmon-async-fixture SCENARIO REPORT_DIR [THRESHOLD_MS]\n".utf8))
    exit(64)
}
let scenario = arguments[1]
let reportDirectory = arguments[2]
let thresholdMs = arguments.count > 3 ? Int(arguments[3]) ?? 100 : 100

/// RLIMIT_NOFILE as setrlimit takes it (an enum in Swift's Glibc).
let RLIMIT_NOFILE_VALUE = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)

@Sendable func say(_ line: String) {
    print(line)
    fflush(nil)
}

/// How long the fixture waits for what it needs before it gives up: the monitor's start-up checks run at background
/// priority, and a loaded machine (the whole suite on two cores) delays them, and any thread, by seconds.
let fixtureWaitLimit: Duration = .seconds(30)

/// Runs `step` until `done()`; past `fixtureWaitLimit` exits 5 saying `what` never came, so a test reports that
/// rather than, say, a stall without its chain or label. The step is the caller's way to wait: a sleep, or a spin
/// where the wait must stay a CPU stall.
@Sendable func waitUntil(_ what: String, step: () -> Void, _ done: () -> Bool) {
    let deadline = ContinuousClock.now + fixtureWaitLimit
    while !done() {
        guard ContinuousClock.now < deadline else { gaveUpWaiting(for: what) }
        step()
    }
}

/// Waits until `pending` is false: the start-up checks have given their verdicts (`waitUntil` for a task).
func awaitStartupChecks(_ pending: () -> Bool) async {
    let deadline = ContinuousClock.now + fixtureWaitLimit
    while pending() {
        guard ContinuousClock.now < deadline else { gaveUpWaiting(for: "the start-up checks' verdicts") }
        try? await Task.sleep(for: .milliseconds(5))
    }
}

@Sendable func gaveUpWaiting(for what: String) -> Never {
    say("error: waited \(fixtureWaitLimit) for \(what)")
    exit(5)
}

func makeMonitor(mainActor: Bool = true, statsInterval: Duration = .seconds(60),
                 poolStatistics: Bool = true) -> ConcurrencyStallMonitor {
    var configuration = StallMonitorConfiguration(detection: .init(threshold: .milliseconds(thresholdMs)),
                                                  reports: .init(directory: reportDirectory))
    configuration.analysis.poolStatistics = poolStatistics
    configuration.detection.sampleInterval = .milliseconds(max(1, thresholdMs / 10))
    configuration.detection.interimAfter = .seconds(10)
    configuration.analysis.loopStatsInterval = statsInterval
    do {
        return try ConcurrencyStallMonitor(configuration: configuration, mainActor: mainActor)
    } catch {
        FileHandle.standardError.write(Data("\(error)\n".utf8))
        exit(3)
    }
}

@Sendable func now() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
}

/// What the stalling jobs measured, printed at the end (printing inside a job would add its own time to the job).
let measurements = Mutex<[String]>([])

/// Runs `body` and records how long it took on this thread.
@Sendable func measured(_ name: String, _ body: () -> Void) {
    let start = now()
    body()
    let end = now()
    let tid = cstallmon_gettid()
    measurements.withLock { $0.append("measured \(name) \(Double(end - start) / 1e6) \(tid)") }
}

/// Blocking jobs that have begun (`blocking(_:)`): the pool scenarios wait for every worker to hold one.
let blockersRunning = Atomic<Int>(0)

/// Runs `body`, a job that blocks its worker, counted in `blockersRunning` from its start.
@Sendable func blocking(_ body: () -> Void) {
    blockersRunning.wrappingAdd(1, ordering: .releasing)
    body()
}

/// Waits (up to 10 s; this thread is no worker) until `count` blocking jobs have begun: then they hold the workers.
func waitForBlockers(_ count: Int) {
    let deadline = now() + 10_000_000_000
    while blockersRunning.load(ordering: .acquiring) < count && now() < deadline { usleep(1_000) }
}

/// Prints the measurements so far.
@Sendable func report() {
    for line in measurements.withLock({ $0 }) { say(line) }
}

/// Injects the `traceparent` a task put into its `ServiceContext`, as a W3C propagator injects its span's: the
/// starvation scenario's tracer.
struct TraceparentInstrument: Instrument {
    enum Key: ServiceContextKey { typealias Value = String }

    /// The blocker `index`'s: trace id `index + 1`, span id `0xabc0 + index`.
    static func traceparent(_ index: Int) -> String {
        "00-" + String(repeating: "0", count: 31) + String(index + 1, radix: 16) + "-"
            + String(repeating: "0", count: 12) + String(0xabc0 + index, radix: 16) + "-01"
    }

    func inject<Carrier, Inject: Injector>(_ context: ServiceContext, into carrier: inout Carrier, using injector: Inject)
    where Inject.Carrier == Carrier {
        if let traceparent = context[Key.self] { injector.inject(traceparent, forKey: "traceparent", into: &carrier) }
    }

    func extract<Carrier, Extract: Extractor>(_ carrier: Carrier, into context: inout ServiceContext,
                                              using extractor: Extract) where Extract.Carrier == Carrier {}
}

enum AsyncStalls {
    @inline(never)
    static func spinCPU(milliseconds: Int) -> Int {
        let end = now() + UInt64(milliseconds) * 1_000_000
        var count = 0
        var candidate = 2
        while now() < end {
            var prime = true
            var divisor = 2
            while divisor * divisor <= candidate {
                if candidate % divisor == 0 { prime = false; break }
                divisor += 1
            }
            if prime { count += 1 }
            candidate += 1
        }
        return count
    }

    @inline(never)
    static func blockingSleep(milliseconds: Int) {
        // Retries EINTR, as code must under any signal (the sampling signal interrupts nanosleep).
        var request = timespec(tv_sec: milliseconds / 1000, tv_nsec: (milliseconds % 1000) * 1_000_000)
        var remaining = timespec()
        while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
    }

    /// Reads an archive synchronously: a blocking read in an unstructured task a labelled request started.
    @inline(never)
    static func readExportArchive(milliseconds: Int) {
        var request = timespec(tv_sec: milliseconds / 1000, tv_nsec: (milliseconds % 1000) * 1_000_000)
        var remaining = timespec()
        while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
    }

    /// Starts an unstructured task (from a nonisolated function: on the global executor, as Vapor's responder tasks)
    /// and waits for it.
    static func exportInTheBackground(milliseconds: Int) async {
        await Task { measured("export") { readExportArchive(milliseconds: milliseconds) } }.value
    }

    /// Encodes a large document with Foundation's JSONEncoder until `milliseconds` passed: the stall's samples are
    /// in Foundation's code (linked into the executable by `--static-swift-stdlib`), called from here.
    @inline(never)
    static func encodeLargeJSON(milliseconds: Int) -> Int {
        let document = (0..<20_000).map { ["id": String($0), "name": "row \($0)", "tags": "a,b,c"] }
        let end = now() + UInt64(milliseconds) * 1_000_000
        var bytes = 0
        while now() < end { bytes += (try? JSONEncoder().encode(document).count) ?? 0 }
        return bytes
    }
}

enum Starvation {
    @inline(never)
    static func holdTheWorker(milliseconds: Int) {
        AsyncStalls.blockingSleep(milliseconds: milliseconds)
    }

    @inline(never)
    static func shortWork(microseconds: UInt64) -> Int {
        let end = now() + microseconds * 1000
        var value = 0
        while now() < end { value &+= 1 }
        return value
    }
}

/// A mutex another (named) thread holds while the actor waits for it.
final class HeldLock: @unchecked Sendable {
    private var mutex = pthread_mutex_t()
    /// Set by the waiter just before it locks: the hold is timed from there, not from when the lock was taken, so a
    /// waiter that a loaded machine starts late still waits the whole hold.
    private let waiterArrived = Atomic<Bool>(false)

    init() {
        pthread_mutex_init(&mutex, nil)
    }

    /// Holds the lock on a thread named `fixture-holder` until a waiter arrived and `milliseconds` more; returns once
    /// it is held. Awaited rather than blocking: the caller's thread (the main actor's) stays free while that thread
    /// starts. It runs on the caller's actor, so the caller's next await on another actor hops from there (off the
    /// global executor, a hop to an idle actor would run the method in the task's own job, not a drain job).
    nonisolated(nonsending) func holdOnAnotherThread(milliseconds: Int) async {
        waiterArrived.store(false, ordering: .relaxed)
        await withCheckedContinuation { (held: CheckedContinuation<Void, Never>) in
            // Named before its body runs; never joined: the fixture exits after the scenario.
            _ = PosixThread.start(name: "fixture-holder") {
                pthread_mutex_lock(&self.mutex)
                say("holder \(cstallmon_gettid())")
                held.resume()
                waitUntil("the lock's waiter", step: { AsyncStalls.blockingSleep(milliseconds: 1) }) {
                    self.waiterArrived.load(ordering: .acquiring)
                }
                AsyncStalls.blockingSleep(milliseconds: milliseconds)
                pthread_mutex_unlock(&self.mutex)
            }
        }
    }

    @inline(never)
    func acquireAndRelease() {
        waiterArrived.store(true, ordering: .releasing)
        pthread_mutex_lock(&mutex)
        pthread_mutex_unlock(&mutex)
    }
}

/// The threads of the "unwinder-loader" scenario: a lock the loop thread holds while it stalls, a thread that waits
/// for that lock inside `dl_iterate_phdr` (holding the loader's list lock, as `dlclose` does while it frees memory),
/// and a thread of the application unwinding itself with libunwind, its caches flushed before each backtrace so that
/// every one looks up unwind tables through `dl_iterate_phdr`.
final class LoaderHazard: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    let stopped = Atomic<Bool>(false)
    let backtraces = Atomic<Int>(0)
    let frames = Atomic<Int>(0)
    let iterations = Atomic<Int>(0)

    init() {
        pthread_mutex_init(mutex, nil)
    }

    /// Spins `milliseconds` holding the lock, and on until `sampled()` (a stack of this stall was captured): the
    /// application's unwinder can keep the handler waiting for libunwind's cache mutex for a while on a loaded
    /// machine; only a handler that never returns keeps the stall going for good (the scenario's timeout).
    @inline(never)
    func holdTheLockAndSpin(milliseconds: Int, until sampled: () -> Bool) {
        pthread_mutex_lock(mutex)
        _ = AsyncStalls.spinCPU(milliseconds: milliseconds)
        while !sampled() { _ = AsyncStalls.spinCPU(milliseconds: 1) }
        pthread_mutex_unlock(mutex)
    }

    func startTheLoaderWaiter() {
        typealias Callback = @convention(c) (OpaquePointer?, Int, UnsafeMutableRawPointer?) -> Int32
        typealias IteratePhdr = @convention(c) (Callback, UnsafeMutableRawPointer?) -> Int32
        // The loader's own function (dlsym), not libunwind's view of it.
        let iterate = unsafeBitCast(dlsym(nil, "dl_iterate_phdr"), to: IteratePhdr.self)
        nonisolated(unsafe) let context = UnsafeMutableRawPointer(mutex)
        Thread.detachNewThread { [self] in
            while !stopped.load(ordering: .relaxed) {
                _ = iterate({ _, _, context in
                    let lock = context!.assumingMemoryBound(to: pthread_mutex_t.self)
                    pthread_mutex_lock(lock)
                    pthread_mutex_unlock(lock)
                    return 1
                }, context)
                iterations.wrappingAdd(1, ordering: .relaxed)
                usleep(1_000)
            }
        }
    }

    /// Steps through its own stack frame by frame, as an application's own use of libunwind does, after flushing
    /// libunwind's caches: every step looks its frame up again (through `dl_iterate_phdr`, holding the cache mutex).
    func startTheApplicationUnwinder() {
        typealias GetContext = @convention(c) (UnsafeMutableRawPointer?) -> Int32
        typealias InitLocal = @convention(c) (UnsafeMutableRawPointer?, UnsafeMutableRawPointer?) -> Int32
        typealias Step = @convention(c) (UnsafeMutableRawPointer?) -> Int32
        typealias FlushCache = @convention(c) (OpaquePointer?, UInt, UInt) -> Void
        guard let getContextSymbol = dlsym(nil, "_Ux86_64_getcontext"),
              let initLocalSymbol = dlsym(nil, "_ULx86_64_init_local"),
              let stepSymbol = dlsym(nil, "_ULx86_64_step"),
              let flushSymbol = dlsym(nil, "_Ux86_64_flush_cache"),
              let addressSpace = dlsym(nil, "_ULx86_64_local_addr_space") else {
            say("error libunwind's local unwinder (x86_64) not found")
            exit(4)
        }
        let getContext = unsafeBitCast(getContextSymbol, to: GetContext.self)
        let initLocal = unsafeBitCast(initLocalSymbol, to: InitLocal.self)
        let step = unsafeBitCast(stepSymbol, to: Step.self)
        let flush = unsafeBitCast(flushSymbol, to: FlushCache.self)
        nonisolated(unsafe) let space = addressSpace.load(as: OpaquePointer?.self)
        Thread.detachNewThread { [self] in
            // unw_context_t and unw_cursor_t are under 1.2 KiB on x86_64.
            let context = UnsafeMutableRawPointer.allocate(byteCount: 4096, alignment: 64)
            let cursor = UnsafeMutableRawPointer.allocate(byteCount: 4096, alignment: 64)
            while !stopped.load(ordering: .relaxed) {
                flush(space, 0, 0)
                guard getContext(context) == 0, initLocal(cursor, context) == 0 else { continue }
                var depth = 0
                while depth < 64 && step(cursor) > 0 { depth += 1 }
                frames.wrappingAdd(depth, ordering: .relaxed)
                backtraces.wrappingAdd(1, ordering: .relaxed)
            }
        }
    }

    func stop() {
        stopped.store(true, ordering: .relaxed)
    }
}

actor Ledger {
    let lock = HeldLock()

    @inline(never)
    func waitForLock() {
        measured("lock") { lock.acquireAndRelease() }
    }
}

enum MainActorWork {
    @MainActor @inline(never)
    static func blockOnTheMainActor(milliseconds: Int) {
        measured("mainsleep") { AsyncStalls.blockingSleep(milliseconds: milliseconds) }
    }
}

/// Four async functions of the fixture, each suspending once for real before it awaits the next; the innermost
/// blocks its worker (CPU, a sleep, or a lock another thread holds). The await chain of each stall must name all four.
enum AwaitChains {
    enum Blocking: String, Sendable { case cpu, sleep, lock }

    static let lock = HeldLock()

    @inline(never)
    static func handleRequest(_ blocking: Blocking) async -> Int {
        try? await Task.sleep(for: .milliseconds(1))
        return await loadAccount(blocking) + 1
    }

    @inline(never)
    static func loadAccount(_ blocking: Blocking) async -> Int {
        try? await Task.sleep(for: .milliseconds(1))
        return await fetchLedger(blocking) + 1
    }

    @inline(never)
    static func fetchLedger(_ blocking: Blocking) async -> Int {
        try? await Task.sleep(for: .milliseconds(1))
        return await readLedgerRecord(blocking) + 1
    }

    @inline(never)
    static func readLedgerRecord(_ blocking: Blocking) async -> Int {
        try? await Task.sleep(for: .milliseconds(1))
        var result = 0
        measured("chain-\(blocking.rawValue)") {
            switch blocking {
            case .cpu: result = AsyncStalls.spinCPU(milliseconds: 3 * thresholdMs)
            case .sleep: AsyncStalls.blockingSleep(milliseconds: 3 * thresholdMs)
            case .lock: lock.acquireAndRelease()
            }
        }
        return result
    }

    /// Awaits itself `depth` times (each suspending once), then spins: a chain longer than stallmon follows.
    @inline(never)
    static func descend(_ depth: Int) async -> Int {
        try? await Task.sleep(for: .milliseconds(1))
        if depth == 0 {
            var result = 0
            measured("chain-deep") { result = AsyncStalls.spinCPU(milliseconds: 3 * thresholdMs) }
            return result
        }
        return await descend(depth - 1) + 1
    }

    /// The same four on the main actor.
    @MainActor @inline(never)
    static func handleOnMain() async -> Int {
        try? await Task.sleep(for: .milliseconds(1))
        return await loadOnMain() + 1
    }

    @MainActor @inline(never)
    static func loadOnMain() async -> Int {
        try? await Task.sleep(for: .milliseconds(1))
        return await fetchOnMain() + 1
    }

    @MainActor @inline(never)
    static func fetchOnMain() async -> Int {
        try? await Task.sleep(for: .milliseconds(1))
        return await readOnMain() + 1
    }

    @MainActor @inline(never)
    static func readOnMain() async -> Int {
        try? await Task.sleep(for: .milliseconds(1))
        var result = 0
        measured("chain-main") { result = AsyncStalls.spinCPU(milliseconds: 3 * thresholdMs) }
        return result
    }
}

/// Two kinds of short jobs, each awaiting through functions of its own before it spins past the threshold: under
/// churn and snapshots, a chain read for one job must never be another's (the other kind's functions). Some spin in
/// a shared actor's method, which many calls wait for: its drain job runs both kinds one after another.
enum ChurnChains {
    actor Shared {
        @inline(never)
        func work(_ microseconds: UInt64) -> Int { Starvation.shortWork(microseconds: microseconds) }
    }

    static let shared = Shared()

    @inline(never)
    static func alphaOuter(_ microseconds: UInt64, onActor: Bool) async -> Int {
        await Task.yield()
        return await alphaInner(microseconds, onActor: onActor) + 1
    }

    @inline(never)
    static func alphaInner(_ microseconds: UInt64, onActor: Bool) async -> Int {
        await Task.yield()
        if onActor { return await shared.work(microseconds) }
        return Starvation.shortWork(microseconds: microseconds)
    }

    @inline(never)
    static func betaOuter(_ microseconds: UInt64, onActor: Bool) async -> Int {
        await Task.yield()
        return await betaInner(microseconds, onActor: onActor) + 1
    }

    @inline(never)
    static func betaInner(_ microseconds: UInt64, onActor: Bool) async -> Int {
        await Task.yield()
        if onActor { return await shared.work(microseconds) }
        return Starvation.shortWork(microseconds: microseconds)
    }
}

/// An actor held by one task while another awaits its method: the waiting task is queued on the actor, and its method
/// runs once the holder is done, in the actor's drain job, whose probe names no task of its own.
actor Vault {
    let holding = Atomic<Bool>(false)
    /// Set by the auditing task just before it awaits `audit()`: the hold lasts from there, so an audit a loaded
    /// machine starts late still finds the vault held.
    let auditAwaited = Atomic<Bool>(false)

    @inline(never)
    func hold() {
        holding.store(true, ordering: .releasing)
        measured("vault-hold") {
            waitUntil("the audit", step: { _ = AsyncStalls.spinCPU(milliseconds: 1) }) {
                auditAwaited.load(ordering: .acquiring)
            }
            _ = AsyncStalls.spinCPU(milliseconds: 3 * thresholdMs)
        }
    }

    @inline(never)
    func audit() -> Int {
        var result = 0
        measured("chain-drain") { result = AsyncStalls.spinCPU(milliseconds: 3 * thresholdMs) }
        return result
    }
}

extension AwaitChains {
    /// Two async functions of the fixture, then the actor's method.
    @inline(never)
    static func auditRequest(_ vault: Vault) async -> Int {
        try? await Task.sleep(for: .milliseconds(1))
        return await auditLedger(vault) + 1
    }

    @inline(never)
    static func auditLedger(_ vault: Vault) async -> Int {
        try? await Task.sleep(for: .milliseconds(1))
        vault.auditAwaited.store(true, ordering: .releasing)
        return await vault.audit() + 1
    }

    /// Holds `vault`, then, while it is held, awaits its method through two functions with a label: the method runs
    /// in the actor's drain job.
    static func auditWhileHeld() async {
        let vault = Vault()
        let holder = Task.detached { await vault.hold() }
        while !vault.holding.load(ordering: .acquiring) { try? await Task.sleep(for: .milliseconds(1)) }
        await StallLabel.withValue("POST /audit") { _ = await auditRequest(vault) }
        await holder.value
    }
}

/// Where tasks wait, each inside its own scope, until all are in.
final class ScopeGate: Sendable {
    private let waiting = Mutex<[CheckedContinuation<Void, Never>]>([])

    var count: Int { waiting.withLock { $0.count } }

    func wait() async {
        await withCheckedContinuation { continuation in waiting.withLock { $0.append(continuation) } }
    }

    func open() {
        for continuation in waiting.withLock({ $0 }) { continuation.resume() }
    }
}

/// An actor pinned to a `Looper`: its methods run on the loop thread, in jobs the loop's executor runs.
actor Teller {
    let loop: Looper
    init(loop: Looper) { self.loop = loop }
    nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }

    @inline(never)
    func post() -> Int {
        var result = 0
        measured("loop-chain") { result = AsyncStalls.spinCPU(milliseconds: 3 * thresholdMs) }
        return result
    }
}

/// An actor pinned to a SwiftNIO event loop, as a service pins one to its channel's loop.
actor Clerk {
    let eventLoop: any EventLoop
    init(eventLoop: any EventLoop) { self.eventLoop = eventLoop }
    nonisolated var unownedExecutor: UnownedSerialExecutor { eventLoop.executor.asUnownedSerialExecutor() }

    @inline(never)
    func withdraw() -> Int {
        var result = 0
        measured("nio-chain") { result = AsyncStalls.spinCPU(milliseconds: 3 * thresholdMs) }
        return result
    }
}

/// Two async functions of the fixture, each suspending once, then the loop-pinned actor's method.
enum LoopChains {
    @inline(never)
    static func handleWithdrawal(_ clerk: Clerk) async -> Int {
        try? await Task.sleep(for: .milliseconds(1))
        return await recordWithdrawal(clerk) + 1
    }

    @inline(never)
    static func recordWithdrawal(_ clerk: Clerk) async -> Int {
        try? await Task.sleep(for: .milliseconds(1))
        return await clerk.withdraw() + 1
    }

    @inline(never)
    static func handleDeposit(_ teller: Teller) async -> Int {
        try? await Task.sleep(for: .milliseconds(1))
        return await recordDeposit(teller) + 1
    }

    @inline(never)
    static func recordDeposit(_ teller: Teller) async -> Int {
        try? await Task.sleep(for: .milliseconds(1))
        return await teller.post() + 1
    }
}

/// An actor whose method awaits the fixture's functions.
actor Accounts {
    @inline(never)
    func settle() async -> Int {
        try? await Task.sleep(for: .milliseconds(1))
        return await AwaitChains.loadAccount(.sleep) + 1
    }
}

switch scenario {
case "stalls":
    // One of each kind, one after the other, then near misses that must not be reported.
    let monitor = makeMonitor()
    monitor.start()
    // The label's layout check runs at start, in a task of its own: a service's first request may come before it.
    await awaitStartupChecks { cstallmon_task_locals_layout() == 0 }
    say("labels \(cstallmon_task_locals_layout())")
    await Task.detached(name: "checkout cart") {
        await StallLabel.withValue("POST /checkout") {
            measured("cpu") { _ = AsyncStalls.spinCPU(milliseconds: 3 * thresholdMs) }
        }
    }.value
    try? await Task.sleep(for: .milliseconds(50))
    // A child task carries its parent's label, with no call of its own.
    await StallLabel.withValue("GET /report") { await withTaskGroup(of: Void.self) { group in
        group.addTask(name: "résumé renderer") {
            // A cancellation handler puts a status record of its own in front of the name's.
            await withTaskCancellationHandler {
                measured("sleep") { AsyncStalls.blockingSleep(milliseconds: 5 * thresholdMs / 2) }
            } onCancel: {}
        }
    }
    }
    try? await Task.sleep(for: .milliseconds(50))
    // So does an unstructured task started inside the scope (a copy of the parent's task-locals).
    await StallLabel.withValue("POST /export") {
        await AsyncStalls.exportInTheBackground(milliseconds: 5 * thresholdMs / 2)
    }
    try? await Task.sleep(for: .milliseconds(50))
    let ledger = Ledger()
    await ledger.lock.holdOnAnotherThread(milliseconds: 3 * thresholdMs)
    await ledger.waitForLock()
    try? await Task.sleep(for: .milliseconds(50))
    for _ in 0..<5 {
        await Task.detached { measured("nearmiss") { _ = AsyncStalls.spinCPU(milliseconds: thresholdMs * 6 / 10) } }
            .value
        try? await Task.sleep(for: .milliseconds(20))
    }
    try? await Task.sleep(for: .milliseconds(200))
    monitor.stop()
    say("jobs \(ConcurrencyStallMonitor.jobsTimed)")

case "await-chains":
    // Each stall awaited through the fixture's four functions: in a task (CPU), a task group's child (a sleep), a
    // task whose innermost function waits for a lock, an actor's method, main-actor code, and a chain deeper than
    // stallmon follows.
    let monitor = makeMonitor()
    monitor.start()
    // The layout check runs at start, in a task of its own (at background priority: a loaded machine delays it).
    await awaitStartupChecks { cstallmon_concurrency_drain_chains() == 0 || cstallmon_task_locals_layout() == 0 }
    say("layout \(cstallmon_concurrency_await_chain_layout())")
    say("drain \(cstallmon_concurrency_drain_chains()) \(cstallmon_current_task_layout())")
    _ = await Task.detached { await AwaitChains.handleRequest(.cpu) }.value
    try? await Task.sleep(for: .milliseconds(50))
    await withTaskGroup(of: Int.self) { group in
        group.addTask { await AwaitChains.handleRequest(.sleep) }
        _ = await group.next()
    }
    try? await Task.sleep(for: .milliseconds(50))
    await AwaitChains.lock.holdOnAnotherThread(milliseconds: 3 * thresholdMs)
    _ = await Task.detached { await AwaitChains.handleRequest(.lock) }.value
    try? await Task.sleep(for: .milliseconds(50))
    _ = await Accounts().settle()
    try? await Task.sleep(for: .milliseconds(50))
    // An actor's drain job: its running task's chain and label.
    await AwaitChains.auditWhileHeld()
    try? await Task.sleep(for: .milliseconds(50))
    _ = await Task.detached { await AwaitChains.handleOnMain() }.value
    try? await Task.sleep(for: .milliseconds(50))
    _ = await Task.detached { await AwaitChains.descend(Int(CSTALLMON_MAX_AWAIT_FRAMES) + 10) }.value
    try? await Task.sleep(for: .milliseconds(200))
    monitor.stop()
    report()

case "checks-refused":
    // What a runtime whose layouts the checks at start do not find gets: the checks pass here, then their verdicts
    // are turned to refusals (the await-chain check called from where it does not resume, the others set), and
    // a labelled stall in an actor's drain job and one in a task, each under awaiting functions, follow.
    let monitor = makeMonitor()
    monitor.start()
    await awaitStartupChecks { cstallmon_concurrency_drain_chains() == 0 || cstallmon_task_locals_layout() == 0 }
    _ = cstallmon_concurrency_await_check_outer()
    cstallmon_concurrency_set_drain_chains(0)
    cstallmon_current_task_set_verdict(0)
    cstallmon_task_locals_set_verdict(0)
    say("refused \(cstallmon_concurrency_await_chain_layout()) \(cstallmon_concurrency_drain_chains()) "
        + "\(cstallmon_current_task_layout()) \(cstallmon_task_locals_layout())")
    await AwaitChains.auditWhileHeld()
    try? await Task.sleep(for: .milliseconds(50))
    _ = await Task.detached { await StallLabel.withValue("GET /ledger") { await AwaitChains.handleRequest(.cpu) } }
        .value
    try? await Task.sleep(for: .milliseconds(200))
    monitor.stop()
    report()

case "loop-chains":
    // Async code a Looper's executor runs (an actor pinned to the loop): its stall is the loop's, and names the
    // functions that awaited it. The ConcurrencyStallMonitor's checks at start find the layouts the chain rests on.
    // The main actor is not watched: this code runs on it, and waits there for the monitors' set-up and stop, which
    // on a loaded machine may take longer than the threshold.
    let monitor = makeMonitor(mainActor: false)
    monitor.start()
    await awaitStartupChecks { cstallmon_concurrency_drain_chains() == 0 }
    say("drain \(cstallmon_concurrency_drain_chains()) \(cstallmon_current_task_layout())")
    let loop = try Looper(name: "chain-loop")
    var configuration = StallMonitorConfiguration(detection: .init(threshold: .milliseconds(thresholdMs)),
                                                  reports: .init(directory: reportDirectory))
    configuration.detection.sampleInterval = .milliseconds(max(1, thresholdMs / 10))
    let loopMonitor = try LooperStallMonitor(loop: loop, configuration: configuration)
    loopMonitor.start()
    let keepAlive = loop.schedule(every: .seconds(1), label: "keep-alive") {}
    Thread.detachNewThread { loop.run(for: .seconds(30)) }
    _ = await LoopChains.handleDeposit(Teller(loop: loop))
    // The same on a SwiftNIO event loop, through its executor.
    let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    let nioMonitor = try NIOStallMonitor(group: group, configuration: configuration)
    nioMonitor.start()
    _ = await LoopChains.handleWithdrawal(Clerk(eventLoop: group.next()))
    try? await Task.sleep(for: .milliseconds(200))
    keepAlive.cancel()
    loop.stop()
    loopMonitor.stop()
    nioMonitor.stop()
    try? await group.shutdownGracefully()
    monitor.stop()
    report()

case "labels-full":
    // More StallLabel scopes open at once than the table holds (4,096): those past it are dropped, never blocking,
    // and the monitor says so (a warning in its log, the stallmon_labels_dropped_total counter).
    let monitor = makeMonitor()
    monitor.start()
    await awaitStartupChecks { cstallmon_task_locals_layout() == 0 }
    let scopes = 4_200
    let gate = ScopeGate()
    await withTaskGroup(of: Void.self) { group in
        for index in 0..<scopes {
            group.addTask { await StallLabel.withValue("scope \(index)") { await gate.wait() } }
        }
        while gate.count < scopes { try? await Task.sleep(for: .milliseconds(5)) }
        gate.open()
    }
    say("dropped \(cstallmon_labels_dropped())")
    try? await Task.sleep(for: .milliseconds(300))
    monitor.stop()

case "chain-churn":
    // Thousands of short jobs of two kinds, a few over the threshold, while a thread asks this process for a
    // snapshot every 10 ms: every sample is taken and its chain read while jobs begin and end around it.
    let monitor = makeMonitor()
    monitor.start()
    // The checks at start, so that drain jobs' chains and labels are read from the first round on.
    await awaitStartupChecks { cstallmon_concurrency_drain_chains() == 0 || cstallmon_task_locals_layout() == 0 }
    say("drain \(cstallmon_concurrency_drain_chains()) \(cstallmon_current_task_layout())")
    let stopSnapshots = Atomic<Bool>(false)
    let snapshots = Atomic<Int>(0)
    let socket = ControlSocketClient.path(directory: reportDirectory, pid: getpid())
    let requester = Thread {
        while !stopSnapshots.load(ordering: .relaxed) {
            if case .success = ControlSocketClient.requestSnapshot(at: socket, timeout: .seconds(5)) {
                snapshots.wrappingAdd(1, ordering: .relaxed)
            }
            usleep(10_000)
        }
    }
    requester.start()
    // At least 40 rounds, and on until 25 snapshots were taken (a loaded machine answers them slower), at most 400.
    var round = 0
    while round < 40 || (snapshots.load(ordering: .relaxed) < 25 && round < 400) {
        defer { round += 1 }
        await withTaskGroup(of: Int.self) { group in
            for index in 0..<100 {
                // One job in 25 spins past the threshold; the others are over in microseconds.
                let microseconds: UInt64 = index % 25 == 0 ? UInt64(thresholdMs) * 1_500 : 50
                // Each labelled with its kind: thousands of scopes opened and closed while their labels are read. One
                // in four spins in the shared actor, and so do two that spin past the threshold: the second waits for
                // the first, and runs in the actor's drain job.
                let onActor = index % 4 == 1 || index % 50 == 0
                if (round + index) % 2 == 0 {
                    group.addTask {
                        await StallLabel.withValue("alpha") {
                            await ChurnChains.alphaOuter(microseconds, onActor: onActor)
                        }
                    }
                } else {
                    group.addTask {
                        await StallLabel.withValue("beta") { await ChurnChains.betaOuter(microseconds, onActor: onActor) }
                    }
                }
            }
            for await _ in group {}
        }
    }
    stopSnapshots.store(true, ordering: .relaxed)
    requester.cancel()
    try? await Task.sleep(for: .milliseconds(200))
    monitor.stop()
    say("snapshots \(snapshots.load(ordering: .relaxed))")
    say("jobs \(ConcurrencyStallMonitor.jobsTimed)")

case "json":
    // A CPU-heavy encode in Foundation's code: the top frame must be this fixture's function, not Foundation's.
    let monitor = makeMonitor()
    monitor.start()
    await Task.detached { measured("json") { _ = AsyncStalls.encodeLargeJSON(milliseconds: 4 * thresholdMs) } }.value
    try? await Task.sleep(for: .milliseconds(200))
    monitor.stop()

case "snapshot":
    // For `stallmon snapshot`: an idle Looper, a Looper busy in one long block, and a pool worker blocked in a task;
    // "ready" once all three are in place, then everything stays so until REPORT_DIR/../release exists or 20 s pass.
    let monitor = makeMonitor()
    monitor.start()
    var configuration = StallMonitorConfiguration(detection: .init(threshold: .milliseconds(thresholdMs)),
                                                  reports: .init(directory: reportDirectory))
    configuration.detection.interimAfter = .seconds(60)
    let idleLoop = try Looper(name: "idle-loop")
    let busyLoop = try Looper(name: "busy-loop")
    let loopMonitors = [try LooperStallMonitor(loop: idleLoop, configuration: configuration),
                        try LooperStallMonitor(loop: busyLoop, configuration: configuration)]
    for loopMonitor in loopMonitors { loopMonitor.start() }
    for loop in [idleLoop, busyLoop] {
        Thread.detachNewThread { loop.run(for: .seconds(25)) }
    }
    let release = Atomic<Bool>(false)
    let running = Atomic<Int>(0)  // the busy block and the blocked task, once each runs
    busyLoop.perform(label: "ledger.rebuild") {
        running.wrappingAdd(1, ordering: .relaxed)
        while !release.load(ordering: .relaxed) { _ = AsyncStalls.spinCPU(milliseconds: 50) }
    }
    let releaseFile = reportDirectory + "/../release"
    let blocked = Task.detached(name: "report renderer") {
        await StallLabel.withValue("GET /report") {
            running.wrappingAdd(1, ordering: .relaxed)
            for _ in 0..<400 where access(releaseFile, F_OK) != 0 { AsyncStalls.blockingSleep(milliseconds: 50) }
        }
    }
    // Both in place (however loaded the machine), and the busy block past the threshold.
    while running.load(ordering: .relaxed) < 2 { usleep(5_000) }
    usleep(UInt32(2 * thresholdMs * 1000))
    say("ready")
    for _ in 0..<400 where access(releaseFile, F_OK) != 0 { usleep(50_000) }
    release.store(true, ordering: .relaxed)
    _ = await blocked.value
    for loop in [idleLoop, busyLoop] { loop.stop() }
    for loopMonitor in loopMonitors { loopMonitor.stop() }
    monitor.stop()

case "pool-stats", "pool-stats-off":
    // Thousands of short jobs, then every worker blocked while a burst of short jobs waits behind them, then a pause
    // long enough for a `pool.stats` line (none with pool_statistics = off).
    let monitor = makeMonitor(mainActor: false, statsInterval: .seconds(1), poolStatistics: scenario == "pool-stats")
    monitor.start()
    await withTaskGroup(of: Int.self) { group in
        for index in 0..<2000 { group.addTask { index &* 7 } }
        for await _ in group {}
    }
    let workers = ProcessInfo.processInfo.activeProcessorCount
    let blockers = (0..<workers).map { index in
        Task.detached {
            measured("blocker\(index)") { blocking { AsyncStalls.blockingSleep(milliseconds: 3 * thresholdMs) } }
        }
    }
    waitForBlockers(workers)
    let burst = (0..<20).map { index in Task.detached { index &* 3 } }
    for task in burst { _ = await task.value }
    for task in blockers { await task.value }
    say("workers \(workers)")
    try? await Task.sleep(for: .milliseconds(1500))
    monitor.stop()
    say("jobs \(ConcurrencyStallMonitor.jobsTimed)")

case "starvation":
    // A burst of short jobs on an idle pool (no report), then as many blocking jobs as workers with the same burst
    // behind them (one starvation report naming every blocker).
    let monitor = makeMonitor(mainActor: false)
    monitor.start()
    // Twenty tasks, each enqueued from this thread (the main actor's, no worker) at once.
    let burst = {
        let tasks = (0..<20).map { index in Task.detached { index &* 3 } }
        for task in tasks { _ = await task.value }
    }
    await burst()
    try? await Task.sleep(for: .milliseconds(300))
    let workers = ProcessInfo.processInfo.activeProcessorCount
    // Each blocker serves a traced request of its own.
    InstrumentationSystem.bootstrap(TraceparentInstrument())
    await awaitStartupChecks { cstallmon_task_locals_layout() == 0 }
    let blockers = (0..<workers).map { index in
        Task.detached(name: "blocker \(index)") {
            var context = ServiceContext.topLevel
            context[TraceparentInstrument.Key.self] = TraceparentInstrument.traceparent(index)
            await ServiceContext.withValue(context) {
                await StallLabel.withValue("GET /slow/\(index)") {
                    measured("blocker\(index)") { blocking { Starvation.holdTheWorker(milliseconds: 3 * thresholdMs) } }
                }
            }
        }
    }
    waitForBlockers(workers)
    let start = now()
    await burst()
    say("burst \(Double(now() - start) / 1e6)")
    for task in blockers { await task.value }
    try? await Task.sleep(for: .milliseconds(200))
    monitor.stop()
    report()

case "busy-pool":
    // Busy for a second with short CPU jobs whose producers wait for each (queue delay stays short: no report),
    // then a flood of short CPU jobs that queue for several thresholds (a busy pool, starved by work).
    let monitor = makeMonitor(mainActor: false)
    monitor.start()
    let workers = ProcessInfo.processInfo.activeProcessorCount
    let until = now() + 1_000_000_000
    await withTaskGroup(of: Void.self) { group in
        for _ in 0..<(workers * 2) {
            group.addTask {
                while now() < until {
                    _ = await Task.detached { Starvation.shortWork(microseconds: 500) }.value
                }
            }
        }
    }
    say("closed loop done")
    try? await Task.sleep(for: .milliseconds(200))
    say("flood \(now())")
    let flood = (0..<(4 * thresholdMs * workers)).map { _ in
        Task.detached { Starvation.shortWork(microseconds: 1000) }
    }
    for task in flood { _ = await task.value }
    try? await Task.sleep(for: .milliseconds(200))
    monitor.stop()

case "main-actor":
    // `await MainActor.run` of an async main, from a task off the main actor, and a @MainActor function.
    let monitor = makeMonitor()
    monitor.start()
    say("mainActorTimed \(monitor.mainActorTimed)")
    await Task.detached {
        await MainActor.run { measured("main") { _ = AsyncStalls.spinCPU(milliseconds: 3 * thresholdMs) } }
    }.value
    try? await Task.sleep(for: .milliseconds(50))
    await Task.detached { await MainActorWork.blockOnTheMainActor(milliseconds: 2 * thresholdMs) }.value
    try? await Task.sleep(for: .milliseconds(200))
    monitor.stop()

case "late":
    // Switched on late, from inside a task on a worker, after thousands of jobs ran untimed (the main actor's
    // executor is left alone: it may only be replaced while no other thread uses it).
    await withTaskGroup(of: Int.self) { group in
        for index in 0..<2000 { group.addTask { index &* 7 } }
        for await _ in group {}
    }
    let monitor = await Task.detached { makeMonitor(mainActor: false) }.value
    monitor.start()
    await Task.detached { measured("cpu") { _ = AsyncStalls.spinCPU(milliseconds: 2 * thresholdMs) } }.value
    monitor.stop()

case "idle":
    let monitor = makeMonitor()
    monitor.start()
    for _ in 0..<100 { try? await Task.sleep(for: .milliseconds(10)) }
    monitor.stop()
    say("jobs \(ConcurrencyStallMonitor.jobsTimed)")

case "churn":
    // Thousands of short tasks, long idle gaps in which libdispatch retires its workers (5 s idle), new workers
    // after them, and a stall after each gap.
    let monitor = makeMonitor()
    monitor.start()
    for round in 0..<2 {
        await withTaskGroup(of: Int.self) { group in
            for index in 0..<5000 { group.addTask { index &* 31 } }
            for await _ in group {}
        }
        await Task.detached { measured("churn\(round)") { _ = AsyncStalls.spinCPU(milliseconds: 2 * thresholdMs) } }
            .value
        try? await Task.sleep(for: .seconds(6))
    }
    monitor.stop()
    say("jobs \(ConcurrencyStallMonitor.jobsTimed)")

case "twice":
    let first = makeMonitor()
    do {
        _ = try ConcurrencyStallMonitor(configuration: first.configuration)
        say("error a second monitor was created")
    } catch {
        say("refused \(error)")
    }
    first.stop()
    // After stop(), a new one takes over.
    let second = makeMonitor()
    second.start()
    await Task.detached { measured("cpu") { _ = AsyncStalls.spinCPU(milliseconds: 2 * thresholdMs) } }.value
    second.stop()

case "unwinder-loader":
    // A thread of the application that unwinds with libunwind itself (as Swift Testing does for every thrown error)
    // while a thread holding the loader's list lock waits for a lock the stalled loop thread holds: the handler must
    // not wait for that unwinding thread, which waits for the loader. Prints "done" when every stall ended.
    let loop = try Looper(name: "unwinder-loop")
    var configuration = StallMonitorConfiguration(detection: .init(threshold: .milliseconds(thresholdMs)),
                                                  reports: .init(directory: reportDirectory))
    configuration.detection.sampleInterval = .milliseconds(max(1, thresholdMs / 10))
    let loopMonitor = try LooperStallMonitor(loop: loop, configuration: configuration)
    loopMonitor.start()
    Thread.detachNewThread { loop.run() }
    let held = LoaderHazard()
    held.startTheLoaderWaiter()
    held.startTheApplicationUnwinder()
    let stalls = 4
    for round in 0..<stalls {
        // One stall at a time, with idle time between them: each is a stall of its own.
        let ended = DispatchSemaphore(value: 0)
        loop.perform(label: "unwinder.stall") {
            let captured = loopMonitor.statistics.samplesCaptured
            measured("unwinder\(round)") {
                held.holdTheLockAndSpin(milliseconds: 3 * thresholdMs) {
                    loopMonitor.statistics.samplesCaptured > captured
                }
            }
            ended.signal()
        }
        // 12 s a stall at most: the four fit the test's 60 s for the whole child.
        if ended.wait(timeout: .now() + 12) == .timedOut {
            say("error: stall \(round) never ended (a handler waiting for good?)")
            exit(5)
        }
        usleep(UInt32(2 * thresholdMs * 1000))
    }
    held.stop()
    usleep(UInt32(2 * thresholdMs * 1000))
    loop.stop()
    loopMonitor.stop()
    say("done \(held.backtraces.load(ordering: .relaxed)) backtraces of "
        + "\(held.frames.load(ordering: .relaxed)) frames, "
        + "\(held.iterations.load(ordering: .relaxed)) loader walks")

case "second-without-descriptors":
    // A second monitor on the same report directory, made with no descriptor left: it needs none of its own (the
    // watchdog and the pipeline are the process's, made by the first), and both monitors' stalls are reported.
    var configuration = StallMonitorConfiguration(detection: .init(threshold: .milliseconds(thresholdMs)),
                                                  reports: .init(directory: reportDirectory))
    configuration.detection.sampleInterval = .milliseconds(max(1, thresholdMs / 10))
    let firstLoop = try Looper(name: "first-loop")
    let first = try LooperStallMonitor(loop: firstLoop, configuration: configuration)
    let secondLoop = try Looper(name: "second-loop")
    usleep(200_000)
    var limit = rlimit()
    getrlimit(RLIMIT_NOFILE_VALUE, &limit)
    let lowestFree = dup(0)
    close(lowestFree)
    var lowered = limit
    lowered.rlim_cur = rlim_t(lowestFree) + 8
    setrlimit(RLIMIT_NOFILE_VALUE, &lowered)
    var fillers: [Int32] = []
    while case let filler = dup(0), filler >= 0 { fillers.append(filler) }  // every descriptor below is taken now
    let second: LooperStallMonitor?
    do {
        second = try LooperStallMonitor(loop: secondLoop, configuration: configuration)
    } catch {
        second = nil
        say("refused \(error)")
    }
    fillers.forEach { close($0) }
    setrlimit(RLIMIT_NOFILE_VALUE, &limit)
    first.start()
    second?.start()
    Thread.detachNewThread { firstLoop.run(for: .seconds(30)) }
    Thread.detachNewThread { secondLoop.run(for: .seconds(30)) }
    let ended = DispatchSemaphore(value: 0)
    for (loop, name) in [(firstLoop, "first"), (secondLoop, "second")] {
        loop.perform(label: LooperLabel("\(name).stall")) {
            // Long enough to be sampled on a loaded machine, where the watchdog may wake late.
            measured(name) { _ = AsyncStalls.spinCPU(milliseconds: 6 * thresholdMs) }
            ended.signal()
        }
    }
    ended.wait()
    ended.wait()
    usleep(UInt32(2 * thresholdMs * 1000))
    firstLoop.stop()
    secondLoop.stop()
    first.stop()
    second?.stop()
    say("done")

case "quiet-loop", "quiet-loop-unmonitored":
    // A monitored Looper (or, for comparison, the same loop without a monitor) runs 300 timer iterations of nothing;
    // the loop thread marks the window with getppid(), a call nothing else in this process makes, for strace.
    var configuration = StallMonitorConfiguration(detection: .init(threshold: .milliseconds(thresholdMs)),
                                                  reports: .init(directory: reportDirectory))
    configuration.analysis.loopStatsInterval = .seconds(3600)
    let loop = try Looper(name: "quiet-loop")
    let monitor = scenario == "quiet-loop" ? try LooperStallMonitor(loop: loop, configuration: configuration) : nil
    monitor?.start()
    let ticks = Mutex(0)
    let ended = DispatchSemaphore(value: 0)
    loop.perform(label: "mark") { _ = getppid() }
    _ = loop.schedule(every: .milliseconds(1), label: "tick") {
        let count = ticks.withLock { count in
            count += 1
            return count
        }
        if count == 300 {
            _ = getppid()
            ended.signal()
        }
    }
    Thread.detachNewThread { loop.run(for: .seconds(30)) }
    ended.wait()
    loop.stop()
    monitor?.stop()
    say("done \(cstallmon_gettid())")

case "foreign-handler":
    // A process whose sampling signal another library took first, before any monitor: refused, naming the handler.
    // In a process of its own: in the test process, a signal is already installed by then.
    let foreign = SamplingSignal(offsetFromRTMin: 6)
    let number = try foreign.resolve()
    signal(number) { _ in }
    do {
        _ = try LooperStallMonitor(loop: try Looper(name: "refuse"), configuration: .init(detection: .init(signal: foreign)))
        say("error took a signal owned by another handler")
    } catch {
        say("refused \(error)")
    }

case "one-watchdog":
    // Eight NIO event loops, a Looper and the pool, each with its monitor: one watchdog thread in the process, and a
    // stall on two loops at once is reported for both. Prints `watchdogs N` (threads named stallmon-watch).
    let pool = makeMonitor(mainActor: false)
    let group = MultiThreadedEventLoopGroup(numberOfThreads: 8)
    var configuration = StallMonitorConfiguration(detection: .init(threshold: .milliseconds(thresholdMs)),
                                                  reports: .init(directory: reportDirectory))
    configuration.detection.sampleInterval = .milliseconds(max(1, thresholdMs / 10))
    let nio = try NIOStallMonitor(group: group, configuration: configuration)
    let loop = try Looper(name: "looper")
    let looper = try LooperStallMonitor(loop: loop, configuration: configuration)
    pool.start()
    nio.start()
    looper.start()
    Thread.detachNewThread { loop.run(for: .seconds(30)) }
    func watchdogThreads() -> Int {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.filter { task in
            let name = (try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8)) ?? ""
            return name.trimmingCharacters(in: .whitespacesAndNewlines) == "stallmon-watch"
        }.count
    }
    let ended = DispatchSemaphore(value: 0)
    let loops = Array(group.makeIterator())
    for (index, eventLoop) in loops.prefix(2).enumerated() {
        eventLoop.execute {
            measured("nio-\(index)") { _ = AsyncStalls.spinCPU(milliseconds: 3 * thresholdMs) }
            ended.signal()
        }
    }
    ended.wait()
    ended.wait()
    usleep(UInt32(2 * thresholdMs * 1000))
    say("watchdogs \(watchdogThreads())")
    loop.stop()
    looper.stop()
    nio.stop()
    pool.stop()
    say("watchdogs-after-stop \(watchdogThreads())")
    say("done")

case "label-check-first":
    // The task-local layout check run before any monitor exists (the bench does): its reads of the process's own
    // memory must not be refused for want of the seccomp probe's verdict. Prints `layout N` (1 passed, -1 failed).
    StallLabel.checkLayout(logger: Logger(label: "fixture"))
    waitUntil("the label check's verdict", step: { usleep(5_000) }) { cstallmon_task_locals_layout() != 0 }
    say("layout \(cstallmon_task_locals_layout())")

case "nio-takeover":
    // NIO's executor take-over first: the global executor's hook is then NIO's.
    guard NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor() else {
        say("error NIO's take-over did not install")
        exit(4)
    }
    _ = makeMonitor()
    say("error the monitor was created")

default:
    FileHandle.standardError.write(Data("unknown scenario \(scenario)\n".utf8))
    exit(64)
}

// What the jobs measured, now that they are done.
report()
