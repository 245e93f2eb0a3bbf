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

    /// A signal source whose loop is gone, so `cancel()` closes the descriptor at once on the cancelling thread: the
    /// widest window for a second close to hit a descriptor opened just after the first.
    private static func orphanedSignalSource() throws -> LooperSignalSource {
        var loop: Looper? = try Looper(name: "orphan")
        let source = try loop!.addSignalHandler(for: [SIGWINCH]) { _ in }
        weak let gone = loop
        loop = nil
        try #require(gone == nil, "the loop is released, so cancel() closes on the calling thread")
        return source
    }

    @Test func concurrentCancelsCloseTheDescriptorOnce() throws {
        let threads = 4
        var numberReused = false
        for _ in 0..<200 {
            let source = try Self.orphanedSignalSource()
            let signalDescriptor = source.fileDescriptor
            // The gone loop's epoll and eventfd, numbered below the signalfd, are free again: taken here, so that the
            // first pipe opened after a cancel gets the signalfd's number.
            var plug: [Int32] = [-1, -1]
            try #require(pipe(&plug) == 0)
            defer {
                close(plug[0])
                close(plug[1])
            }
            let arrived = Counter()
            let opened = Locked<[Int32]>([])
            // Each thread cancels, then opens a pipe, which takes the lowest free numbers: the signalfd's as soon as
            // one cancel closed it. A second close by a late cancel would close that pipe under its owner.
            let cancellers = (0..<threads).map { _ in
                TestThread {
                    arrived.increment()
                    while arrived.value < threads { sched_yield() }
                    source.cancel()
                    var fds: [Int32] = [-1, -1]
                    guard pipe(&fds) == 0 else { return }
                    opened.append(fds[0])
                    opened.append(fds[1])
                }
            }
            for thread in cancellers { #expect(thread.join(timeout: .seconds(5))) }
            source.cancel()  // and once more after all of them: still nothing closed
            let descriptors = opened.value
            #expect(descriptors.count == 2 * threads, "every thread opened its pipe")
            if descriptors.contains(signalDescriptor) { numberReused = true }
            let closedUnderUs = descriptors.filter { fcntl($0, F_GETFD) == -1 }
            #expect(closedUnderUs.isEmpty, "descriptors opened after a cancel were closed by another: \(closedUnderUs)")
            for descriptor in descriptors where !closedUnderUs.contains(descriptor) { close(descriptor) }
            if !closedUnderUs.isEmpty { return }
        }
        // The check above means something only if the cancels do close: a pipe then takes the signalfd's number.
        #expect(numberReused, "the signalfd was closed by a cancel")
    }

    @Test func anInvalidSignalIsAClearError() throws {
        let loop = try Looper(name: "bad-signal")
        #expect(throws: LooperError.self) { try loop.addSignalHandler(for: [999]) { _ in } }
    }
}
