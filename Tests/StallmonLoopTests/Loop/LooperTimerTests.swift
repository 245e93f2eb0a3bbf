import StallmonLoop
import Synchronization
import Testing

@Suite("Looper timers", .serialized)
struct LooperTimerTests {
    @Test("a one-shot timer fires once, not before its delay, then is invalid")
    func oneShotFiresOnceAfterDelay() throws {
        let loop = try Looper(name: "timer-oneshot")
        let firings = Locked<[MonotonicInstant]>([])
        let offLoop = Counter()
        let start = MonotonicInstant.now()
        let timer = loop.schedule(after: .milliseconds(80)) {
            firings.append(MonotonicInstant.now())
            if !loop.isOnLoopThread { offLoop.increment() }
            loop.stop()
        }
        #expect(timer.isValid)
        #expect(timer.interval == nil)
        runBounded(loop) { $0.run(for: .seconds(2)) }
        // Keep running a while: a one-shot timer must not fire again.
        runBounded(loop) { $0.run(for: .milliseconds(100)) }

        let times = firings.value
        try #require(times.count == 1)
        #expect(millisecondsBetween(start, times[0]) >= 80, "fired \(millisecondsBetween(start, times[0])) ms in")
        #expect(offLoop.value == 0)
        #expect(!timer.isValid)
    }

    @Test("a repeating timer fires repeatedly, never early, and stops when cancelled from its block")
    func repeatingStopsWhenCancelledInside() throws {
        let loop = try Looper(name: "timer-repeating")
        let firings = Locked<[MonotonicInstant]>([])
        let holder = Locked<LooperTimer?>(nil)
        let start = MonotonicInstant.now()
        let timer = loop.schedule(every: .milliseconds(10)) {
            firings.append(MonotonicInstant.now())
            if firings.value.count == 5 {
                holder.value?.cancel()
                loop.schedule(after: .milliseconds(100)) { loop.stop() }
            }
        }
        holder.withLock { $0 = timer }
        #expect(timer.interval == .milliseconds(10))
        runBounded(loop) { $0.run(for: .seconds(2)) }

        let times = firings.value
        #expect(times.count == 5, "a timer cancelled on the loop thread fired again")
        for (index, time) in times.enumerated() {
            // Firing n (1-based) is due no earlier than n intervals after scheduling.
            #expect(millisecondsBetween(start, time) >= Double(10 * (index + 1)), "firing \(index + 1) was early")
        }
        #expect(!timer.isValid)
    }

    @Test("a repeating timer cancelled from another thread stops")
    func repeatingCancelledFromAnotherThread() throws {
        let background = try BackgroundLoop(name: "timer-cancel-thread")
        let loop = background.loop
        let fires = Counter()
        let timer = loop.schedule(every: .milliseconds(5)) { fires.increment() }
        #expect(waitUntil { fires.value >= 3 })
        let canceller = TestThread { timer.cancel() }
        canceller.join()
        #expect(!timer.isValid)
        background.sync()  // the removal has reached the loop
        let afterCancel = fires.value
        pause(.milliseconds(60))
        #expect(fires.value == afterCancel)
        background.stop()
    }

    @Test("the first firing waits for initialDelay")
    func initialDelay() throws {
        let loop = try Looper(name: "timer-initial-delay")
        let firings = Locked<[MonotonicInstant]>([])
        let start = MonotonicInstant.now()
        loop.schedule(every: .milliseconds(10), initialDelay: .milliseconds(80)) {
            firings.append(MonotonicInstant.now())
            if firings.value.count == 2 { loop.stop() }
        }
        runBounded(loop) { $0.run(for: .seconds(2)) }
        let times = firings.value
        try #require(times.count == 2)
        #expect(millisecondsBetween(start, times[0]) >= 80)
        #expect(millisecondsBetween(start, times[1]) >= 90)
    }

    @Test("cancelling a timer before it fires prevents it")
    func cancelBeforeFiring() throws {
        // Cancelled before the loop ever ran.
        let loop = try Looper(name: "timer-cancel-early")
        let fires = Counter()
        let timer = loop.schedule(after: .milliseconds(20)) { fires.increment() }
        timer.cancel()
        #expect(!timer.isValid)
        timer.cancel()  // twice is harmless
        runBounded(loop) { $0.run(for: .milliseconds(100)) }
        #expect(fires.value == 0)

        // Cancelled from another thread while the loop runs.
        let background = BackgroundLoop(loop)
        let second = loop.schedule(after: .milliseconds(40)) { fires.increment() }
        second.cancel()
        // Cancelled on the loop thread, from a block.
        let third = loop.schedule(after: .milliseconds(40)) { fires.increment() }
        loop.perform { third.cancel() }
        background.sync()
        pause(.milliseconds(100))
        #expect(fires.value == 0)
        background.stop()
    }

    @Test("a timer cancelled by another timer's block does not fire")
    func cancelledByAnotherTimer() throws {
        let loop = try Looper(name: "timer-cancel-sibling")
        let victimFires = Counter()
        let victim = Locked<LooperTimer?>(nil)
        loop.schedule(after: .milliseconds(20)) { victim.value?.cancel() }
        victim.withLock { $0 = loop.schedule(after: .milliseconds(20)) { victimFires.increment() } }
        loop.schedule(after: .milliseconds(80)) { loop.stop() }
        runBounded(loop) { $0.run(for: .seconds(2)) }
        #expect(victimFires.value == 0)
    }

    @Test("timers fire in due order")
    func dueOrder() throws {
        let loop = try Looper(name: "timer-order")
        let order = Locked<[Int]>([])
        let delays = [50, 10, 30, 20, 40]
        for (index, delay) in delays.enumerated() {
            loop.schedule(after: .milliseconds(delay)) {
                order.append(index)
                if order.value.count == delays.count { loop.stop() }
            }
        }
        runBounded(loop) { $0.run(for: .seconds(2)) }
        #expect(order.value == [1, 3, 2, 4, 0])
    }

    @Test("timers scheduled from other threads while the loop runs fire, once each, on the loop thread")
    func scheduledFromOtherThreads() throws {
        let background = try BackgroundLoop(name: "timer-threads")
        let loop = background.loop
        let fires = Locked<[Int]>([])
        let offLoop = Counter()
        let threads = (0..<4).map { thread in
            TestThread {
                for index in 0..<5 {
                    loop.schedule(after: .milliseconds(index * 5)) {
                        if !loop.isOnLoopThread { offLoop.increment() }
                        fires.append(thread * 5 + index)
                    }
                }
            }
        }
        for thread in threads { #expect(thread.join()) }
        #expect(waitUntil { fires.value.count >= 20 })
        pause(.milliseconds(30))
        #expect(fires.value.sorted() == Array(0..<20))
        #expect(offLoop.value == 0)

        // A repeating timer scheduled from another thread fires repeatedly.
        let repeats = Counter()
        let repeating = TestThread { loop.schedule(every: .milliseconds(5)) { repeats.increment() } }
        repeating.join()
        #expect(waitUntil { repeats.value >= 3 })
        background.stop()
    }

    @Test("tolerance lets an early timer wait and fire in the same pass as a later one")
    func toleranceCoalesces() throws {
        let loop = try Looper(name: "timer-tolerance")
        let pass = Counter()
        loop.addObserver(for: .beforeTimers) { _, _ in pass.increment() }
        let early = Locked<(pass: Int, time: MonotonicInstant)?>(nil)
        let late = Locked<(pass: Int, time: MonotonicInstant)?>(nil)
        let scheduledAt = Locked<MonotonicInstant?>(nil)
        // Schedule both from a timer block, so that no pending wake-up of the loop's own can split them.
        loop.schedule(after: .milliseconds(5)) {
            scheduledAt.withLock { $0 = MonotonicInstant.now() }
            loop.schedule(after: .milliseconds(30), tolerance: .milliseconds(500)) {
                early.withLock { $0 = (pass.value, MonotonicInstant.now()) }
            }
            loop.schedule(after: .milliseconds(100)) {
                late.withLock { $0 = (pass.value, MonotonicInstant.now()) }
                loop.stop()
            }
        }
        runBounded(loop) { $0.run(for: .seconds(2)) }
        let earlyFiring = try #require(early.value)
        let lateFiring = try #require(late.value)
        let start = try #require(scheduledAt.value)
        #expect(earlyFiring.pass == lateFiring.pass, "the early timer did not wait for the later one")
        #expect(millisecondsBetween(start, earlyFiring.time) >= 100)
    }

    @Test("a stalled loop skips missed repeating firings instead of bursting them")
    func stallSkipsMissedFirings() throws {
        let loop = try Looper(name: "timer-stall")
        let firings = Locked<[MonotonicInstant]>([])
        let stallEnd = Locked<MonotonicInstant?>(nil)
        let count = Counter()
        loop.schedule(every: .milliseconds(20)) {
            firings.append(MonotonicInstant.now())
            if count.increment() == 1 {
                pause(.milliseconds(200))  // ten firings are missed
                stallEnd.withLock { $0 = MonotonicInstant.now() }
                loop.schedule(after: .milliseconds(150)) { loop.stop() }
            }
        }
        runBounded(loop) { $0.run(for: .seconds(2)) }

        let end = try #require(stallEnd.value)
        let windowEnd = end.advanced(by: .milliseconds(70))
        let times = firings.value
        let afterStall = times.filter { $0 >= end }
        let inWindow = afterStall.filter { $0 <= windowEnd }
        #expect(afterStall.count >= 2, "the timer stopped after the stall: \(afterStall.count) firings")
        // Skipping: one catch-up firing plus at most one per 20 ms slot of the 70 ms window. Bursting: 10 more.
        #expect(inWindow.count <= 5, "\(inWindow.count) firings within 70 ms of the stall")
    }
}
