import StallmonLoop
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `addSignalHandler`: a process signal handled as ordinary code on the loop thread, through a signalfd.
@Suite(.serialized)
struct LooperSignalTests {
    @Test func aSignalSentToTheLoopThreadRunsTheHandlerOnTheLoop() throws {
        let loop = try Looper(name: "signals")
        let received = Locked<[Int32]>([])
        let handlerThread = Atomic<Int32>(0)
        let loopThread = Atomic<Int32>(0)
        let loopPthread = Atomic<UInt>(0)
        let installed = Flag()
        // Installed on the loop's own thread, as `main` does before it runs the loop (the mask is per thread).
        let thread = TestThread {
            loopThread.store(currentKernelThreadID(), ordering: .releasing)
            loopPthread.store(UInt(pthread_self()), ordering: .releasing)
            guard (try? loop.addSignalHandler(for: [SIGWINCH, SIGURG]) { signal in
                received.withLock { $0.append(signal) }
                handlerThread.store(currentKernelThreadID(), ordering: .releasing)
                if received.withLock({ $0.count }) == 2 { loop.stop() }
            }) != nil else { return }
            installed.set()
            loop.run(for: .seconds(5))
        }
        #expect(waitUntil { installed.isSet && loop.isRunning })
        // Thread-directed (SIGWINCH and SIGURG are ignored by default, so nothing else in the test process cares).
        let tid = loopThread.load(ordering: .acquiring)
        let target = pthread_t(loopPthread.load(ordering: .acquiring))
        #expect(pthread_kill(target, SIGWINCH) == 0)
        pause(.milliseconds(20))
        #expect(pthread_kill(target, SIGURG) == 0)
        #expect(thread.join(timeout: .seconds(3)), "the handler stopped the loop")
        #expect(received.withLock { $0 } == [SIGWINCH, SIGURG])
        #expect(handlerThread.load(ordering: .acquiring) == tid, "ran on the loop thread")
    }

    @Test func anInvalidSignalIsAClearError() throws {
        let loop = try Looper(name: "bad-signal")
        #expect(throws: LooperError.self) { try loop.addSignalHandler(for: [999]) { _ in } }
    }
}
