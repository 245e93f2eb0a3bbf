import StallmonLoop
import Testing

/// An actor whose every method runs on a `Looper`'s thread.
actor LoopBoundLedger {
    let loop: Looper
    private(set) var entries: [Int] = []

    init(loop: Looper) {
        self.loop = loop
    }

    nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }

    func append(_ value: Int) -> (onLoop: Bool, current: Bool) {
        entries.append(value)
        return (loop.isOnLoopThread, Looper.current === loop)
    }

    /// Posts a block, then yields: the continuation is queued behind the block, so runs after it.
    func yieldBehindABlock(_ log: Locked<[String]>, _ labels: Locked<[LooperLabel]>) async {
        loop.perform { log.append("block") }
        await Task.yield()
        log.append("after yield")
        labels.append(loop.currentLabel)
    }

    func appendAfterSleeping(_ value: Int, for duration: Duration) async throws {
        try await Task.sleep(for: duration)
        entries.append(value)
    }
}

@Suite("Looper as a Swift Concurrency executor")
struct LooperExecutorTests {
    @Test("an actor pinned to the loop runs its methods on the loop thread")
    func actorRunsOnLoop() async throws {
        let background = try BackgroundLoop(name: "executor-actor")
        let ledger = LoopBoundLedger(loop: background.loop)
        for value in 0..<100 {
            let where_ = await ledger.append(value)
            #expect(where_.onLoop && where_.current)
        }
        #expect(await ledger.entries == Array(0..<100))
        background.stop()
    }

    @Test("a task that prefers the loop runs on it")
    func taskExecutorPreference() async throws {
        let background = try BackgroundLoop(name: "executor-task")
        let loop = background.loop
        let onLoop = await Task(executorPreference: loop) { loop.isOnLoopThread }.value
        #expect(onLoop)
        background.stop()
    }

    @Test("jobs run in enqueue order with the posted blocks, labelled by priority")
    func enqueueOrder() async throws {
        let background = try BackgroundLoop(name: "executor-order")
        let ledger = LoopBoundLedger(loop: background.loop)
        let log = Locked<[String]>([])
        let labels = Locked<[LooperLabel]>([])
        await Task(priority: .high) { await ledger.yieldBehindABlock(log, labels) }.value
        #expect(log.value == ["block", "after yield"])
        #expect(labels.value == [.asyncHigh])
        background.stop()
    }

    @Test("assumeIsolated works in the loop's own callbacks; isolation checks answer for the loop thread only")
    func isolationChecks() async throws {
        let background = try BackgroundLoop(name: "executor-isolation")
        let loop = background.loop
        let ledger = LoopBoundLedger(loop: loop)
        let count = Locked(-1)
        loop.perform {
            // A plain posted block, outside any task: the runtime asks the loop whether this is its context.
            let entries = ledger.assumeIsolated { $0.entries.count }
            count.withLock { $0 = entries }
        }
        background.sync()
        #expect(count.value == 0)
        #expect(loop.isIsolatingCurrentContext() == false)
        #expect(loop.isSameExclusiveExecutionContext(other: loop))
        #expect(try !loop.isSameExclusiveExecutionContext(other: Looper(name: "executor-other")))
        background.stop()
    }

    @Test("checkIsolated traps off the loop thread")
    func checkIsolatedTraps() async {
        await #expect(processExitsWith: .failure) {
            let loop = try! Looper(name: "executor-trap")
            loop.checkIsolated()
        }
    }

    @Test("an await that suspends lets the loop run other work meanwhile")
    func awaitFreesTheLoop() async throws {
        let background = try BackgroundLoop(name: "executor-await")
        let ledger = LoopBoundLedger(loop: background.loop)
        let sleeper = Task { try await ledger.appendAfterSleeping(1, for: .milliseconds(200)) }
        try await Task.sleep(for: .milliseconds(20))
        let start = MonotonicInstant.now()
        #expect(background.sync())  // the loop is free while the actor method awaits
        #expect(millisecondsBetween(start, .now()) < 150)
        _ = await ledger.append(2)
        try await sleeper.value
        #expect(await ledger.entries == [2, 1])
        background.stop()
    }
}
