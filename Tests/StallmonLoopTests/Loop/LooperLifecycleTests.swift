import StallmonLoop
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("Looper life cycle", .serialized)
struct LooperLifecycleTests {
    // MARK: - Creating

    @Test("a new loop has its name, is not running, and has no thread")
    func newLoop() throws {
        let loop = try Looper(name: "lifecycle-new")
        #expect(loop.name == "lifecycle-new")
        #expect(!loop.isRunning)
        #expect(!loop.isOnLoopThread)
        #expect(loop.threadID == 0)
        #expect(loop.observerCount == 0)
        #expect(loop.currentLabel == .none)
    }

    // MARK: - Stopping

    @Test("stop() from another thread makes run() return")
    func stopFromAnotherThread() throws {
        let loop = try Looper(name: "lifecycle-stop")
        let exited = Flag()
        loop.addObserver(for: .exit) { _, _ in exited.set() }
        let background = BackgroundLoop(loop)
        #expect(loop.isRunning)
        #expect(!loop.isOnLoopThread, "the test thread is not the loop thread")
        background.sync()
        pause(.milliseconds(20))  // asleep in epoll, no timers: only stop() can end run()
        #expect(!exited.isSet)
        let stopper = TestThread { loop.stop() }
        stopper.join()
        #expect(waitUntil { background.threadFinished }, "run() did not return after stop()")
        #expect(exited.isSet)
        #expect(!loop.isRunning)
        background.stop()
    }

    @Test("stop() from a block on the loop thread makes run() return")
    func stopFromInside() throws {
        let loop = try Looper(name: "lifecycle-stop-inside")
        let later = Counter()
        loop.perform {
            loop.stop()
            loop.perform { later.increment() }  // posted after stop(): the run ends before its pass
        }
        let returned = runBounded(loop) { $0.run() }
        #expect(returned)
        #expect(later.value == 0)
        #expect(!loop.isRunning)
    }

    @Test("stop() before run() makes the next run() return at once, and only that one")
    func stopBeforeRun() throws {
        let loop = try Looper(name: "lifecycle-stop-early")
        let passes = Counter()
        loop.addObserver(for: .beforeTimers) { _, _ in passes.increment() }
        loop.stop()
        #expect(runBounded(loop) { $0.run() })
        #expect(passes.value == 0)

        // The stop request was consumed: the next run lasts until its deadline.
        let start = MonotonicInstant.now()
        runBounded(loop) { $0.run(for: .milliseconds(60)) }
        #expect(millisecondsBetween(start, MonotonicInstant.now()) >= 60)
        #expect(passes.value >= 1)
    }

    // MARK: - Deadlines

    @Test("run(until:) returns at the deadline")
    func runUntilDeadline() throws {
        let loop = try Looper(name: "lifecycle-until")
        let start = MonotonicInstant.now()
        let deadline = start.advanced(by: .milliseconds(100))
        let returnedAt = Locked<MonotonicInstant?>(nil)
        #expect(runBounded(loop) { loop in
            loop.run(until: deadline)
            returnedAt.withLock { $0 = MonotonicInstant.now() }
        })
        let end = try #require(returnedAt.value)
        #expect(end >= deadline, "returned \(millisecondsBetween(end, deadline)) ms early")
        #expect(millisecondsBetween(deadline, end) < 1_000, "returned long after the deadline")
        #expect(!loop.isRunning)
    }

    @Test("run(for:) returns after the duration, also while timers fire and work keeps coming")
    func runForWhileBusy() throws {
        let loop = try Looper(name: "lifecycle-for")
        let ticks = Counter()
        let ticker = loop.schedule(every: .milliseconds(5)) { ticks.increment() }
        let start = MonotonicInstant.now()
        runBounded(loop) { $0.run(for: .milliseconds(80)) }
        let elapsed = millisecondsBetween(start, MonotonicInstant.now())
        #expect(elapsed >= 80)
        #expect(elapsed < 1_000)
        #expect(ticks.value >= 1)
        ticker.cancel()

        // Endless posted work: every pass polls, and the deadline still ends the run.
        let blocks = Counter()
        @Sendable func forever() {
            blocks.increment()
            loop.perform(forever)
        }
        loop.perform(forever)
        let busyStart = MonotonicInstant.now()
        #expect(runBounded(loop) { $0.run(for: .milliseconds(80)) })
        let busyElapsed = millisecondsBetween(busyStart, MonotonicInstant.now())
        #expect(busyElapsed >= 80)
        #expect(blocks.value > 1)
    }

    @Test("run(until:) with a deadline in the past returns at once with entry and exit")
    func pastDeadline() throws {
        let loop = try Looper(name: "lifecycle-past")
        let log = Locked<[LooperActivity]>([])
        loop.addObserver(for: .allActivities) { activity, _ in log.append(activity) }
        #expect(runBounded(loop) { $0.run(until: MonotonicInstant(nanoseconds: 0)) })
        #expect(log.value == [.entry, .exit])
    }

    // MARK: - Threads

    @Test("the loop thread: isOnLoopThread inside run only, threadID set while running and after")
    func loopThreadIdentity() throws {
        let loop = try Looper(name: "lifecycle-thread")
        let insideOnLoop = Flag()
        let insideTID = Locked<Int32>(-1)
        let reportedTID = Locked<Int32>(0)
        loop.perform {
            if loop.isOnLoopThread { insideOnLoop.set() }
            insideTID.withLock { $0 = currentKernelThreadID() }
            reportedTID.withLock { $0 = loop.threadID }
            loop.stop()
        }
        #expect(loop.threadID == 0)
        // Run on this very thread: isOnLoopThread must turn false again once run returns.
        loop.run(for: .seconds(2))
        #expect(insideOnLoop.isSet)
        #expect(!loop.isOnLoopThread)
        #expect(insideTID.value > 0)
        #expect(reportedTID.value == insideTID.value)
        #expect(loop.threadID == insideTID.value, "threadID must stay set after run returns")
    }

    @Test("a loop can run again after returning, on another thread")
    func restart() throws {
        let loop = try Looper(name: "lifecycle-restart")
        let entries = Counter()
        loop.addObserver(for: .entry) { _, _ in entries.increment() }
        loop.perform { loop.stop() }
        runBounded(loop) { $0.run(for: .seconds(2)) }
        let firstTID = loop.threadID
        #expect(firstTID != 0)

        // A timer scheduled between runs fires in the next run.
        let fired = Flag()
        loop.schedule(after: .milliseconds(10)) {
            fired.set()
            loop.stop()
        }
        runBounded(loop) { $0.run(for: .seconds(2)) }
        #expect(fired.isSet)
        #expect(entries.value == 2)
        #expect(loop.threadID != 0)
        #expect(loop.threadID != firstTID, "each run was on a new helper thread")
    }

    // MARK: - currentLabel

    @Test("currentLabel names a running block, from inside and from another thread, and is .none when idle")
    func currentLabelOfBlock() throws {
        let background = try BackgroundLoop(name: "lifecycle-label-block")
        let loop = background.loop
        let label = LooperLabel("lifecycle.test-block")
        let inside = Locked<LooperLabel?>(nil)
        let entered = Flag()
        let release = Flag()
        #expect(loop.currentLabel == .none)
        loop.perform(label: label) {
            inside.withLock { $0 = loop.currentLabel }
            entered.set()
            waitUntil { release.isSet }
        }
        #expect(waitUntil { entered.isSet })
        #expect(inside.value == label)
        #expect(loop.currentLabel == label, "another thread must see the label while the block runs")
        #expect(loop.currentLabel.name == "lifecycle.test-block")
        release.set()
        #expect(waitUntil { loop.currentLabel == .none }, "the label outlived its block")
        #expect(loop.currentLabel.id == 0)
        background.stop()
    }

    @Test("currentLabel names a running timer, and is .none when idle")
    func currentLabelOfTimer() throws {
        let background = try BackgroundLoop(name: "lifecycle-label-timer")
        let loop = background.loop
        let label = LooperLabel("lifecycle.test-timer")
        let inside = Locked<LooperLabel?>(nil)
        let entered = Flag()
        let release = Flag()
        loop.schedule(after: .milliseconds(5), label: label) {
            inside.withLock { $0 = loop.currentLabel }
            entered.set()
            waitUntil { release.isSet }
        }
        #expect(waitUntil { entered.isSet })
        #expect(inside.value == label)
        #expect(loop.currentLabel == label)
        release.set()
        #expect(waitUntil { loop.currentLabel == .none })
        background.stop()
    }

    @Test("default labels: perform, timer, fd, custom-source; custom labels for sources")
    func defaultAndSourceLabels() throws {
        let background = try BackgroundLoop(name: "lifecycle-label-defaults")
        let loop = background.loop
        let seen = Locked<[String: LooperLabel]>([:])
        loop.perform { seen.withLock { $0["perform"] = loop.currentLabel } }
        loop.schedule(after: .zero) { seen.withLock { $0["timer"] = loop.currentLabel } }
        let custom = loop.addCustomSource { seen.withLock { $0["custom"] = loop.currentLabel } }
        let labelled = loop.addCustomSource(label: "lifecycle.source") {
            seen.withLock { $0["custom-labelled"] = loop.currentLabel }
        }
        let pair = try SocketPair()
        let reader = loop.addReader(pair.first) {
            _ = readAvailable(pair.first)
            seen.withLock { $0["fd"] = loop.currentLabel }
        }
        let labelledWriter = Locked<LooperFDSource?>(nil)
        labelledWriter.withLock {
            $0 = loop.addWriter(pair.second, label: "lifecycle.writer") {
                seen.withLock { $0["fd-labelled"] = loop.currentLabel }
                labelledWriter.value?.cancel()
            }
        }
        background.sync()
        custom.signal()
        labelled.signal()
        #expect(writeAll(pair.second, [1]))
        #expect(waitUntil { seen.value.count == 6 }, "\(seen.value)")
        let labels = seen.value
        #expect(labels["perform"] == .perform)
        #expect(labels["timer"] == .timer)
        #expect(labels["custom"] == .customSource)
        #expect(labels["custom-labelled"] == LooperLabel("lifecycle.source"))
        #expect(labels["fd"] == .fileDescriptor)
        #expect(labels["fd-labelled"] == LooperLabel("lifecycle.writer"))
        reader.cancel()
        custom.cancel()
        labelled.cancel()
        background.stop()
    }

    @Test("currentLabel is .none in observers that follow a labelled callout")
    func currentLabelInObservers() throws {
        let loop = try Looper(name: "lifecycle-label-observers")
        let timerRan = Flag()
        let fdRan = Flag()
        let afterTimer = Locked<LooperLabel?>(nil)
        let afterFD = Locked<LooperLabel?>(nil)
        // beforeSources follows the timers of its pass; beforeTimers follows the descriptors of the pass before.
        loop.addObserver(for: .beforeSources) { _, _ in
            if timerRan.isSet && afterTimer.value == nil { afterTimer.withLock { $0 = loop.currentLabel } }
        }
        loop.addObserver(for: .beforeTimers) { _, _ in
            if fdRan.isSet && afterFD.value == nil {
                afterFD.withLock { $0 = loop.currentLabel }
                loop.stop()
            }
        }
        let pair = try SocketPair()
        loop.schedule(after: .milliseconds(5), label: "lifecycle.observer-timer") {
            timerRan.set()
            _ = writeAll(pair.second, [1])
        }
        let reader = loop.addReader(pair.first, label: "lifecycle.observer-fd") {
            _ = readAvailable(pair.first)
            fdRan.set()
        }
        runBounded(loop) { $0.run(for: .seconds(2)) }
        #expect(afterTimer.value == LooperLabel.none, "observer saw \(String(describing: afterTimer.value))")
        #expect(afterFD.value == LooperLabel.none, "observer saw \(String(describing: afterFD.value))")
        reader.cancel()
    }

    // MARK: - Misuse and failure

    @Test("running a loop that is already running traps")
    func reentrantRunTraps() async {
        await #expect(processExitsWith: .failure) {
            let loop = try! Looper(name: "lifecycle-reentrant")
            loop.perform { loop.run() }
            loop.run(for: .seconds(1))
        }
    }

    @Test("init throws a LooperError when the process is out of descriptors")
    func initThrowsWithoutDescriptors() async {
        await #expect(processExitsWith: .success) {
            var limit = rlimit()
            getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
            limit.rlim_cur = 0  // no new descriptor can be opened
            guard setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { exit(2) }
            do throws(LooperError) {
                _ = try Looper(name: "lifecycle-no-descriptors")
                exit(1)
            } catch {
                exit(error.description.contains("failed") ? 0 : 3)
            }
        }
    }

    // MARK: - Deallocation

    @Test("a loop that is dropped is deallocated, also with registrations still queued for it")
    func loopIsReleased() throws {
        weak var plain: Looper?
        do {
            let loop = try Looper(name: "lifecycle-release-plain")
            plain = loop
        }
        #expect(plain == nil)

        weak var ran: Looper?
        do {
            let loop = try Looper(name: "lifecycle-release-ran")
            ran = loop
            loop.schedule(after: .milliseconds(1)) {}
            loop.run(for: .milliseconds(20))
        }
        #expect(ran == nil)

        // A timer cancelled after the loop stopped (a usual shutdown order) queues its removal for a loop that
        // never runs again; that must not keep the loop, and its descriptors, alive.
        weak var queued: Looper?
        var timer: LooperTimer?
        do {
            let loop = try Looper(name: "lifecycle-release-queued")
            queued = loop
            timer = loop.schedule(after: .seconds(10)) {}
            loop.run(for: .milliseconds(5))
            timer?.cancel()
        }
        #expect(queued == nil, "the loop leaked through its own queued registration")
        _ = timer
    }
}
