import StallmonLoop
import Synchronization
import Testing

@Suite("Looper.perform", .serialized)
struct LooperPerformTests {
    @Test("blocks posted from 4 threads × 1000 all run exactly once, on the loop thread, in per-thread order")
    func manyThreads() throws {
        let background = try BackgroundLoop(name: "perform-threads")
        let loop = background.loop
        let threadCount = 4
        let perThread = 1000
        let runs = Locked<[Int]>(Array(repeating: 0, count: threadCount * perThread))
        let lastSeen = Locked<[Int]>(Array(repeating: -1, count: threadCount))
        let outOfOrder = Counter()
        let offLoop = Counter()
        let total = Counter()
        let threads = (0..<threadCount).map { thread in
            TestThread {
                for sequence in 0..<perThread {
                    loop.perform {
                        if !loop.isOnLoopThread { offLoop.increment() }
                        let inOrder = lastSeen.withLock { last -> Bool in
                            defer { last[thread] = sequence }
                            return last[thread] == sequence - 1
                        }
                        if !inOrder { outOfOrder.increment() }
                        runs.withLock { $0[thread * perThread + sequence] += 1 }
                        total.increment()
                    }
                }
            }
        }
        for thread in threads { #expect(thread.join()) }
        #expect(waitUntil { total.value >= threadCount * perThread }, "only \(total.value) blocks ran")
        background.sync()
        #expect(total.value == threadCount * perThread)
        #expect(runs.value.allSatisfy { $0 == 1 }, "a block ran twice or never")
        #expect(outOfOrder.value == 0)
        #expect(offLoop.value == 0)
        background.stop()
    }

    @Test("blocks posted from one thread run in posting order")
    func postingOrder() throws {
        let background = try BackgroundLoop(name: "perform-order")
        let loop = background.loop
        let order = Locked<[Int]>([])
        for index in 0..<1000 {
            loop.perform { order.append(index) }
        }
        #expect(waitUntil { order.value.count >= 1000 })
        #expect(order.value == Array(0..<1000))
        background.stop()
    }

    @Test("blocks posted before run() run once it starts, in order")
    func postedBeforeRun() throws {
        let loop = try Looper(name: "perform-before-run")
        let order = Locked<[Int]>([])
        for index in 0..<10 {
            loop.perform { order.append(index) }
        }
        loop.perform { loop.stop() }
        runBounded(loop) { $0.run(for: .seconds(2)) }
        #expect(order.value == Array(0..<10))
    }

    @Test("a block posted from a block runs after the current batch")
    func postedFromLoopThread() throws {
        let loop = try Looper(name: "perform-nested")
        let order = Locked<[String]>([])
        loop.perform {
            order.append("outer-1")
            loop.perform {
                order.append("nested")
                loop.stop()
            }
            order.append("outer-1-end")
        }
        loop.perform { order.append("outer-2") }
        runBounded(loop) { $0.run(for: .seconds(2)) }
        #expect(order.value == ["outer-1", "outer-1-end", "outer-2", "nested"])
    }

    @Test("perform wakes a sleeping loop")
    func performWakesTheLoop() throws {
        let background = try BackgroundLoop(name: "perform-wake")
        let loop = background.loop
        let sleeping = Flag()
        loop.addObserver(for: .beforeWaiting) { _, _ in sleeping.set() }
        background.sync()
        #expect(waitUntil { sleeping.isSet })
        pause(.milliseconds(20))  // the loop is asleep in epoll with no timer
        let ran = Flag()
        let poster = TestThread { loop.perform { ran.set() } }
        poster.join()
        #expect(waitUntil { ran.isSet })
        background.stop()
    }
}
