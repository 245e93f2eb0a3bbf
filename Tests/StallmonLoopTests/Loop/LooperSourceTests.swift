import StallmonLoop
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("Looper file-descriptor sources", .serialized)
struct LooperFDSourceTests {
    @Test("a reader runs on the loop thread when another thread writes; cancel() stops it")
    func readerAndCancel() throws {
        let background = try BackgroundLoop(name: "fd-reader")
        let loop = background.loop
        let pair = try SocketPair()
        let received = Locked<[UInt8]>([])
        let calls = Counter()
        let offLoop = Counter()
        let source = loop.addReader(pair.first) {
            calls.increment()
            if !loop.isOnLoopThread { offLoop.increment() }
            let bytes = readAvailable(pair.first).bytes
            received.withLock { $0 += bytes }
        }
        #expect(source.fileDescriptor == pair.first)
        #expect(source.interest == .read)
        background.sync()
        pause(.milliseconds(20))
        #expect(calls.value == 0, "the reader ran with nothing to read")

        let writer = TestThread { writeAll(pair.second, Array("hello".utf8)) }
        #expect(writer.join())
        #expect(waitUntil { received.value == Array("hello".utf8) })
        let writer2 = TestThread { writeAll(pair.second, Array(" world".utf8)) }
        #expect(writer2.join())
        #expect(waitUntil { received.value == Array("hello world".utf8) })
        #expect(offLoop.value == 0)

        source.cancel()
        #expect(!source.isValid)
        background.sync()
        let callsAtCancel = calls.value
        #expect(writeAll(pair.second, [1, 2, 3]))
        pause(.milliseconds(60))
        #expect(calls.value == callsAtCancel, "a cancelled reader ran")
        // The loop left the data alone.
        #expect(readAvailable(pair.first).bytes == [1, 2, 3])
        background.stop()
    }

    @Test("a reader that leaves data unread is called again (level-triggered)")
    func levelTriggered() throws {
        let background = try BackgroundLoop(name: "fd-level")
        let loop = background.loop
        let pair = try SocketPair()
        let calls = Counter()
        let received = Locked<[UInt8]>([])
        let source = loop.addReader(pair.first) {
            calls.increment()
            // Read one byte per call.
            var byte: UInt8 = 0
            if read(pair.first, &byte, 1) == 1 { received.append(byte) }
        }
        background.sync()
        #expect(writeAll(pair.second, [10, 20, 30, 40]))
        #expect(waitUntil { received.value.count == 4 })
        #expect(received.value == [10, 20, 30, 40])
        #expect(calls.value >= 4)
        source.cancel()
        background.stop()
    }

    @Test("a reader sees end of file when the write end closes")
    func readerSeesEndOfFile() throws {
        let background = try BackgroundLoop(name: "fd-eof")
        let loop = background.loop
        let pipe = try Pipe()
        let sawEnd = Flag()
        let holder = Locked<LooperFDSource?>(nil)
        holder.withLock {
            $0 = loop.addReader(pipe.readEnd) {
                if readAvailable(pipe.readEnd).atEnd {
                    sawEnd.set()
                    holder.value?.cancel()
                }
            }
        }
        background.sync()
        #expect(writeAll(pipe.writeEnd, [1]))
        let closer = TestThread { pipe.closeWriteEnd() }
        closer.join()
        #expect(waitUntil { sawEnd.isSet })
        background.stop()
    }

    @Test("a writer fires when the descriptor is writable")
    func writerFiresWhenWritable() throws {
        let background = try BackgroundLoop(name: "fd-writer")
        let loop = background.loop
        let pair = try SocketPair()
        let calls = Counter()
        let offLoop = Counter()
        let holder = Locked<LooperFDSource?>(nil)
        let callsWhenCancelled = Locked<Int?>(nil)
        let source = loop.addWriter(pair.second) {
            calls.increment()
            if !loop.isOnLoopThread { offLoop.increment() }
            // The handler may fire before the test thread has stored the source (level-triggered: it is writable
            // at once); it cancels itself on the first call that can.
            if let source = holder.value {
                source.cancel()
                callsWhenCancelled.withLock { $0 = $0 ?? calls.value }
            }
        }
        holder.withLock { $0 = source }
        #expect(source.interest == .write)
        #expect(waitUntil { callsWhenCancelled.value != nil })
        background.sync()
        pause(.milliseconds(20))
        #expect(calls.value == callsWhenCancelled.value, "a writer cancelled in its own handler ran again")
        #expect(offLoop.value == 0)
        background.stop()
    }

    @Test("a writer on a full socket waits until the peer drains it")
    func writerWaitsForSpace() throws {
        let background = try BackgroundLoop(name: "fd-writer-full")
        let loop = background.loop
        let pair = try SocketPair()
        // Fill the socket until the kernel refuses more.
        let chunk = [UInt8](repeating: 7, count: 4096)
        var written = 0
        var failure: Int32 = 0
        while true {
            let count = chunk.withUnsafeBytes { write(pair.second, $0.baseAddress, $0.count) }
            if count <= 0 {
                failure = errno
                break
            }
            written += count
        }
        #expect(failure == EAGAIN)
        #expect(written > 0)

        let calls = Counter()
        let holder = Locked<LooperFDSource?>(nil)
        holder.withLock {
            $0 = loop.addWriter(pair.second) {
                calls.increment()
                holder.value?.cancel()
            }
        }
        background.sync()
        pause(.milliseconds(60))
        #expect(calls.value == 0, "the writer fired while the socket was full")

        let filled = written
        let reader = TestThread {
            var drained = 0
            let deadline = MonotonicInstant.now().advanced(by: .seconds(2))
            while drained < filled && MonotonicInstant.now() < deadline {
                let bytes = readAvailable(pair.first).bytes
                drained += bytes.count
                if bytes.isEmpty { pause(.milliseconds(1)) }
            }
        }
        #expect(reader.join(timeout: .seconds(2.5)))
        #expect(waitUntil { calls.value == 1 })
        background.stop()
    }

    @Test("a reader and a writer share a descriptor; each can be cancelled on its own and re-added")
    func readerAndWriterOnOneDescriptor() throws {
        let background = try BackgroundLoop(name: "fd-shared")
        let loop = background.loop
        let pair = try SocketPair()
        let writerCalls = Counter()
        let writerHolder = Locked<LooperFDSource?>(nil)
        let received = Locked<[UInt8]>([])
        let reader = loop.addReader(pair.first) {
            let bytes = readAvailable(pair.first).bytes
            received.withLock { $0 += bytes }
        }
        writerHolder.withLock {
            $0 = loop.addWriter(pair.first) {
                writerCalls.increment()
                writerHolder.value?.cancel()  // leaves the reader registered on the same descriptor
            }
        }
        #expect(waitUntil { writerCalls.value == 1 })
        #expect(writeAll(pair.second, [1, 2]))
        #expect(waitUntil { received.value == [1, 2] })
        pause(.milliseconds(20))
        #expect(writerCalls.value == 1)

        reader.cancel()  // now nothing is registered on the descriptor
        background.sync()
        #expect(writeAll(pair.second, [3]))
        pause(.milliseconds(40))
        #expect(received.value == [1, 2])

        let again = loop.addReader(pair.first) {
            let bytes = readAvailable(pair.first).bytes
            received.withLock { $0 += bytes }
        }
        #expect(waitUntil { received.value == [1, 2, 3] })
        again.cancel()
        background.stop()
    }

    @Test("a descriptor epoll refuses (a regular file) leaves the source cancelled")
    func regularFileIsRefused() throws {
        let background = try BackgroundLoop(name: "fd-regular-file")
        let loop = background.loop
        var template = Array("/tmp/stallmon-loop-test-XXXXXX".utf8CString)
        let fd = mkstemp(&template)
        try #require(fd >= 0)
        defer {
            close(fd)
            unlink(template)
        }
        let calls = Counter()
        let source = loop.addReader(fd) { calls.increment() }
        background.sync()
        #expect(!source.isValid)
        pause(.milliseconds(20))
        #expect(calls.value == 0)
        background.stop()
    }
}

@Suite("Looper custom sources", .serialized)
struct LooperCustomSourceTests {
    @Test("signal() from another thread runs the handler once, on the loop thread")
    func signalRunsHandlerOnce() throws {
        let background = try BackgroundLoop(name: "custom-signal")
        let loop = background.loop
        let calls = Counter()
        let offLoop = Counter()
        let source = loop.addCustomSource {
            calls.increment()
            if !loop.isOnLoopThread { offLoop.increment() }
        }
        #expect(source.isValid)
        background.sync()
        pause(.milliseconds(20))
        #expect(calls.value == 0, "the handler ran without a signal")

        let signaller = TestThread { source.signal() }
        signaller.join()
        #expect(waitUntil { calls.value == 1 })
        pause(.milliseconds(40))
        #expect(calls.value == 1)

        let again = TestThread { source.signal() }
        again.join()
        #expect(waitUntil { calls.value == 2 })
        #expect(offLoop.value == 0)
        source.cancel()
        background.stop()
    }

    @Test("signals sent while the loop is busy coalesce into one call")
    func signalsCoalesce() throws {
        let background = try BackgroundLoop(name: "custom-coalesce")
        let loop = background.loop
        let calls = Counter()
        let source = loop.addCustomSource { calls.increment() }
        background.sync()

        // From the loop thread: three signals in one block.
        loop.perform {
            source.signal()
            source.signal()
            source.signal()
        }
        #expect(waitUntil { calls.value >= 1 })
        background.sync()
        #expect(calls.value == 1)

        // From another thread, while the loop is stuck in a block.
        let busy = Flag()
        let signalled = Flag()
        loop.perform {
            busy.set()
            waitUntil { signalled.isSet }
        }
        #expect(waitUntil { busy.isSet })
        let signaller = TestThread {
            for _ in 0..<5 { source.signal() }
            signalled.set()
        }
        signaller.join()
        #expect(waitUntil { calls.value >= 2 })
        background.sync()
        pause(.milliseconds(20))
        #expect(calls.value == 2)
        source.cancel()
        background.stop()
    }

    @Test("only the signalled source runs")
    func onlySignalledSourceRuns() throws {
        let background = try BackgroundLoop(name: "custom-two")
        let loop = background.loop
        let first = Counter()
        let second = Counter()
        let a = loop.addCustomSource { first.increment() }
        let b = loop.addCustomSource { second.increment() }
        background.sync()
        b.signal()
        #expect(waitUntil { second.value == 1 })
        background.sync()
        #expect(first.value == 0)
        a.cancel()
        b.cancel()
        background.stop()
    }

    @Test("a cancelled source never runs, and cancel drops a pending signal")
    func cancelStopsSource() throws {
        let background = try BackgroundLoop(name: "custom-cancel")
        let loop = background.loop
        let calls = Counter()
        let source = loop.addCustomSource { calls.increment() }
        background.sync()
        source.signal()
        #expect(waitUntil { calls.value == 1 })

        source.cancel()
        #expect(!source.isValid)
        source.signal()
        background.sync()
        pause(.milliseconds(30))
        #expect(calls.value == 1, "a cancelled source ran")

        // Signalled, then cancelled before the loop got to it.
        let dropped = Counter()
        let pending = loop.addCustomSource { dropped.increment() }
        background.sync()
        let busy = Flag()
        let release = Flag()
        loop.perform {
            busy.set()
            waitUntil { release.isSet }
        }
        #expect(waitUntil { busy.isSet })
        pending.signal()
        pending.cancel()
        release.set()
        background.sync()
        pause(.milliseconds(30))
        #expect(dropped.value == 0, "a signal pending at cancel() ran")
        background.stop()
    }

    @Test("a source signalled before the loop runs fires once when it starts")
    func signalBeforeRun() throws {
        let loop = try Looper(name: "custom-before-run")
        let calls = Counter()
        let source = loop.addCustomSource {
            calls.increment()
            loop.stop()
        }
        source.signal()
        source.signal()
        runBounded(loop) { $0.run(for: .seconds(2)) }
        #expect(calls.value == 1)
        source.cancel()
    }
}
