import StallmonLoop
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

// Helpers shared by the StallmonLoop behaviour tests. Everything here avoids Foundation and the cooperative pool:
// loops run on plain pthreads so a test that blocks never starves another.

/// A value behind a `Mutex`, shareable by the `@Sendable` closures handed to a `Looper`.
final class Locked<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>

    init(_ value: Value) {
        mutex = Mutex(value)
    }

    @discardableResult
    func withLock<R: Sendable>(_ body: (inout Value) -> R) -> R {
        mutex.withLock { value in body(&value) }
    }

    var value: Value { withLock { $0 } }
}

extension Locked {
    func append<Element: Sendable>(_ element: Element) where Value == [Element] {
        withLock { $0.append(element) }
    }
}

/// An atomic counter.
final class Counter: Sendable {
    private let storage = Atomic<Int>(0)

    init() {}

    @discardableResult
    func increment() -> Int {
        storage.wrappingAdd(1, ordering: .sequentiallyConsistent).newValue
    }

    var value: Int { storage.load(ordering: .sequentiallyConsistent) }
}

/// An atomic flag.
final class Flag: Sendable {
    private let storage = Atomic<Bool>(false)

    init() {}

    func set() { storage.store(true, ordering: .sequentiallyConsistent) }
    var isSet: Bool { storage.load(ordering: .sequentiallyConsistent) }
}

/// Sleeps the calling thread.
func pause(_ duration: Duration) {
    let nanoseconds = max(0, duration.nanosecondsClamped)
    var request = timespec(tv_sec: Int(nanoseconds / 1_000_000_000), tv_nsec: Int(nanoseconds % 1_000_000_000))
    var remaining = timespec()
    while nanosleep(&request, &remaining) != 0 && errno == EINTR {
        request = remaining
    }
}

/// Polls `condition` every millisecond until it holds or `timeout` passes; returns whether it held. The defaults of
/// these waits are generous (30 s): they bound a hang, and a loaded machine must never fail a test that passes.
@discardableResult
func waitUntil(timeout: Duration = .seconds(30), _ condition: () -> Bool) -> Bool {
    let deadline = MonotonicInstant.now().advanced(by: timeout)
    while true {
        if condition() { return true }
        if MonotonicInstant.now() >= deadline { return condition() }
        pause(.milliseconds(1))
    }
}

/// Milliseconds from `start` to `end` (negative when `end` is earlier).
func millisecondsBetween(_ start: MonotonicInstant, _ end: MonotonicInstant) -> Double {
    if end >= start {
        return Double(end.nanoseconds(since: start)) / 1_000_000
    }
    return -Double(start.nanoseconds(since: end)) / 1_000_000
}

/// The kernel thread id of the caller, read from /proc/thread-self ("<pid>/task/<tid>").
func currentKernelThreadID() -> Int32 {
    var buffer = [CChar](repeating: 0, count: 128)
    let count = readlink("/proc/thread-self", &buffer, buffer.count - 1)
    guard count > 0 else { return -1 }
    let text = String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    guard let last = text.split(separator: "/").last, let tid = Int32(last) else { return -1 }
    return tid
}

/// A plain POSIX thread running `body`.
final class TestThread: Sendable {
    private final class Start {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }

    private let handle: Mutex<pthread_t?>
    private let finished = Atomic<Bool>(false)

    init(_ body: @escaping @Sendable () -> Void) {
        handle = Mutex(nil)
        let start = Start { [self] in
            body()
            self.finished.store(true, ordering: .releasing)
        }
        let argument = Unmanaged.passRetained(start).toOpaque()
        var thread = pthread_t()
        let rc = pthread_create(&thread, nil, { argument in
            let start = Unmanaged<Start>.fromOpaque(argument!).takeRetainedValue()
            start.body()
            return nil
        }, argument)
        precondition(rc == 0, "pthread_create failed: \(rc)")
        handle.withLock { $0 = thread }
    }

    var isFinished: Bool { finished.load(ordering: .acquiring) }

    /// Waits up to `timeout` for the thread to finish and joins it. Returns false (and detaches the thread, so the
    /// test process does not hang) when it did not finish in time.
    @discardableResult
    func join(timeout: Duration = .seconds(30)) -> Bool {
        let done = waitUntil(timeout: timeout) { isFinished }
        guard let thread = handle.withLock({ value -> pthread_t? in
            let thread = value
            value = nil
            return thread
        }) else { return done }
        if done {
            pthread_join(thread, nil)
        } else {
            pthread_detach(thread)
        }
        return done
    }
}

/// A `Looper` running `run()` on its own thread for the duration of a test.
final class BackgroundLoop: Sendable {
    let loop: Looper
    private let thread: TestThread

    /// Starts `loop.run()` on a new thread and waits until the loop is running.
    init(_ loop: Looper, sourceLocation: SourceLocation = #_sourceLocation) {
        self.loop = loop
        thread = TestThread { loop.run() }
        let started = waitUntil { loop.isRunning }
        #expect(started, "the loop thread did not start", sourceLocation: sourceLocation)
    }

    /// Convenience: a fresh loop named `name`, running.
    convenience init(name: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        self.init(try Looper(name: name), sourceLocation: sourceLocation)
    }

    /// Posts an empty block and waits until it ran: every change posted before this call has taken effect.
    @discardableResult
    func sync(timeout: Duration = .seconds(30), sourceLocation: SourceLocation = #_sourceLocation) -> Bool {
        let ran = Flag()
        loop.perform { ran.set() }
        let ok = waitUntil(timeout: timeout) { ran.isSet }
        #expect(ok, "the loop did not run a posted block in time", sourceLocation: sourceLocation)
        return ok
    }

    /// Stops the loop and joins its thread; records a failure when `run()` did not return in time.
    @discardableResult
    func stop(timeout: Duration = .seconds(30), sourceLocation: SourceLocation = #_sourceLocation) -> Bool {
        loop.stop()
        let stopped = thread.join(timeout: timeout)
        #expect(stopped, "run() did not return after stop()", sourceLocation: sourceLocation)
        return stopped
    }

    var threadFinished: Bool { thread.isFinished }
}

/// Runs `body(loop)` where `loop.run(...)` is expected to return by itself, on a helper thread, so that a loop
/// which never returns fails the test instead of hanging it. Returns whether `body` returned within `timeout`.
@discardableResult
func runBounded(_ loop: Looper, timeout: Duration = .seconds(30), sourceLocation: SourceLocation = #_sourceLocation,
                _ body: @escaping @Sendable (Looper) -> Void) -> Bool {
    let thread = TestThread { body(loop) }
    if thread.join(timeout: timeout) { return true }
    Issue.record("the loop did not return in time", sourceLocation: sourceLocation)
    // Rescue: keep stopping until the thread leaves `run`.
    for _ in 0..<100 where !thread.isFinished {
        loop.stop()
        pause(.milliseconds(10))
    }
    thread.join(timeout: .milliseconds(100))
    return false
}

/// A non-blocking AF_UNIX stream socket pair, closed on deinit.
final class SocketPair: Sendable {
    let first: Int32
    let second: Int32

    init() throws {
        var fds: [Int32] = [-1, -1]
        let rc = socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds)
        try #require(rc == 0, "socketpair failed: errno \(errno)")
        first = fds[0]
        second = fds[1]
        setNonBlocking(first)
        setNonBlocking(second)
    }

    deinit {
        close(first)
        close(second)
    }
}

/// A non-blocking pipe; `closeWriteEnd()` may close the write end early.
final class Pipe: Sendable {
    let readEnd: Int32
    private let writeEndStorage: Atomic<Int32>

    init() throws {
        var fds: [Int32] = [-1, -1]
        try #require(pipe(&fds) == 0, "pipe failed: errno \(errno)")
        readEnd = fds[0]
        writeEndStorage = Atomic(fds[1])
        setNonBlocking(fds[0])
        setNonBlocking(fds[1])
    }

    var writeEnd: Int32 { writeEndStorage.load(ordering: .acquiring) }

    func closeWriteEnd() {
        let fd = writeEndStorage.exchange(-1, ordering: .acquiringAndReleasing)
        if fd >= 0 { close(fd) }
    }

    deinit {
        close(readEnd)
        closeWriteEnd()
    }
}

func setNonBlocking(_ fd: Int32) {
    let flags = fcntl(fd, F_GETFL)
    _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
}

/// Writes all of `bytes` to a descriptor (retrying short writes and EAGAIN briefly). Returns false on error.
@discardableResult
func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
    var offset = 0
    let deadline = MonotonicInstant.now().advanced(by: .seconds(2))
    while offset < bytes.count {
        let written = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        if written > 0 {
            offset += written
        } else if written < 0 && (errno == EAGAIN || errno == EINTR) && MonotonicInstant.now() < deadline {
            pause(.milliseconds(1))
        } else {
            return false
        }
    }
    return true
}

/// Reads everything currently available on a non-blocking descriptor. `atEnd` is true when read returned 0.
func readAvailable(_ fd: Int32) -> (bytes: [UInt8], atEnd: Bool) {
    var result: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
        let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if count > 0 {
            result.append(contentsOf: buffer[0..<count])
        } else if count == 0 {
            return (result, true)
        } else if errno == EINTR {
            continue
        } else {
            return (result, false)
        }
    }
}
