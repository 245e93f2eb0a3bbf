import CStallmonLoopShims
import Foundation
import StallmonLoop
import Synchronization

/// The stalls the demo injects, each in a function with a name you should find at the top of its report.
/// All are real work, not simulations of a stall: on the loop thread CPU, a blocking sleep, a blocking read, a lock
/// held by another thread, a large JSON encode; and in a task on Swift Concurrency's global executor, a synchronous
/// render that holds its worker.
enum DemoStalls {
    /// In async code: a task on the global executor that renders a report synchronously (CPU), holding its worker
    /// thread, as a blocking route handler does. Returns at once; the task runs on a worker.
    static func blockAWorkerInATask(milliseconds: Int) {
        Task.detached { _ = renderReportInTask(milliseconds: milliseconds) }
    }

    /// Formats rows of a report until `milliseconds` have passed: CPU in this very function, so it tops the stack.
    @inline(never)
    static func renderReportInTask(milliseconds: Int) -> Int {
        let deadline = MonotonicInstant.now().advanced(by: .milliseconds(milliseconds))
        var checksum = 0
        var row = 0
        while MonotonicInstant.now() < deadline {
            for _ in 0..<500 {
                row &+= 1
                checksum = checksum &* 31 &+ (row % 97) &* (row % 89)
            }
        }
        return checksum
    }

    /// The loop never comes back: CPU work that does not end (until the process does).
    @inline(never)
    static func hangForever() -> Never {
        while true { _ = crunchPrimes(milliseconds: 1000) }
    }

    /// CPU-bound: counts primes by trial division in chunks until `milliseconds` have passed.
    @inline(never)
    static func crunchPrimes(milliseconds: Int) -> Int {
        let deadline = MonotonicInstant.now().advanced(by: .milliseconds(milliseconds))
        var found = 0
        var candidate = 3
        while MonotonicInstant.now() < deadline {
            for _ in 0..<2_000 {
                var divisor = 3
                var prime = true
                while divisor * divisor <= candidate {
                    if candidate % divisor == 0 {
                        prime = false
                        break
                    }
                    divisor += 2
                }
                if prime { found += 1 }
                candidate += 2
            }
        }
        return found
    }

    /// Blocking sleep on the loop thread (the classic `sleep()` in a request handler).
    @inline(never)
    static func sleepOnTheLoop(milliseconds: Int) {
        var request = timespec(tv_sec: milliseconds / 1000, tv_nsec: (milliseconds % 1000) * 1_000_000)
        var remaining = timespec()
        while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
    }

    /// Blocking read of a TCP connection to a peer on 127.0.0.1, another thread, that answers only after
    /// `milliseconds` (a slow database, say): the report names both ends of the connection.
    @inline(never)
    static func readFromSlowPeer(milliseconds: Int) -> Int {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard listener >= 0 else { return -1 }
        defer { close(listener) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let listening = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                bind(listener, raw, length) == 0 && listen(listener, 1) == 0 && getsockname(listener, raw, &length) == 0
            }
        }
        guard listening else { return -1 }
        let connection = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard connection >= 0 else { return -1 }
        defer { close(connection) }
        let connected = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(connection, $0, length) == 0 }
        }
        guard connected else { return -1 }
        let peer = accept(listener, nil, nil)
        guard peer >= 0 else { return -1 }
        Thread.detachNewThread {
            cstallmon_set_thread_name("slow-peer")
            usleep(UInt32(clamping: min(max(milliseconds, 0), 4_000_000) * 1000))
            var byte: UInt8 = 42
            _ = write(peer, &byte, 1)
            close(peer)
        }
        var byte: UInt8 = 0
        var got = -1
        repeat { got = read(connection, &byte, 1) } while got < 0 && errno == EINTR
        return got
    }

    /// Waits for a lock that a background thread holds for `milliseconds`.
    @inline(never)
    static func waitForContendedLock(_ lock: ContendedLock, milliseconds: Int) {
        let holding = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            // The report names the lock's holder by this name. Set on the thread itself: Foundation's
            // `Thread.current.name` reaches the kernel only if the parent already recorded the new thread's handle,
            // a race a loaded run lost (the holder was reported as "stallmon").
            cstallmon_set_thread_name("ledger-writer")
            lock.holdFor(milliseconds: milliseconds, signalWhenHeld: holding)
        }
        holding.wait()
        lock.acquireAndRelease()
    }

    /// Encodes a large document with JSONEncoder, repeatedly, for at least `milliseconds`.
    @inline(never)
    static func encodeLargeJSON(milliseconds: Int) -> Int {
        // Plain dictionaries, so no Codable code of the demo's own runs inside the encoder: the innermost frame of
        // the service's own code is this function on every sample (a synthesized `encode(to:)` would compete).
        let orders = (0..<20_000).map { index in
            ["id": "\(index)", "customer": "customer-\(index % 977)", "items": "sku-\(index),sku-\(index + 1)",
             "total": "\(Double(index) * 1.25)", "notes": String(repeating: "x", count: 40)]
        }
        let deadline = MonotonicInstant.now().advanced(by: .milliseconds(milliseconds))
        var bytes = 0
        let encoder = JSONEncoder()
        repeat {
            bytes += (try? encoder.encode(orders).count) ?? 0
        } while MonotonicInstant.now() < deadline
        return bytes
    }
}

/// A pthread mutex shared by the loop thread and a background thread that hogs it.
final class ContendedLock: @unchecked Sendable {
    // @unchecked: the pthread mutex is the synchronization.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    /// Set by the waiter just before it locks: the hold is timed from there, so a loop thread a loaded machine runs
    /// late still waits the whole stall.
    private let waiterArrived = Atomic<Bool>(false)

    init() {
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Holds the lock until a waiter arrived (10 s at most), then `milliseconds` more.
    func holdFor(milliseconds: Int, signalWhenHeld: DispatchSemaphore) {
        waiterArrived.store(false, ordering: .relaxed)
        pthread_mutex_lock(mutex)
        signalWhenHeld.signal()
        let deadline = MonotonicInstant.now().advanced(by: .seconds(10))
        while !waiterArrived.load(ordering: .acquiring) && MonotonicInstant.now() < deadline { usleep(1_000) }
        Self.flushLedger(milliseconds: milliseconds)
        pthread_mutex_unlock(mutex)
    }

    /// What the holder does under the lock, as a database writer would: appends to a ledger file and syncs it,
    /// again and again, for `milliseconds`. The report names this function as what the holder was running.
    @inline(never)
    static func flushLedger(milliseconds: Int) {
        let path = FileManager.default.temporaryDirectory.path + "/stallmon-demo-ledger-\(getpid())"
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        defer {
            if fd >= 0 { close(fd) }
            unlink(path)
        }
        let block = [UInt8](repeating: 0x4c, count: 64 << 10)
        var checksum: UInt64 = 0
        let deadline = MonotonicInstant.now().advanced(by: .milliseconds(milliseconds))
        var entries = 0
        repeat {
            // A checksum of each entry, then the write, and a sync every fourth entry: the holder both runs and
            // waits on the disk. (Its stack is sampled only while it runs: a sync on a busy disk is an
            // uninterruptible wait, which a signal would not interrupt, so a sync after every entry could leave no
            // running moment to sample on a loaded machine.)
            for byte in block { checksum = (checksum &* 31) &+ UInt64(byte) }
            if fd >= 0 {
                _ = block.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                entries += 1
                if entries % 4 == 0 { fsync(fd) }
            }
        } while MonotonicInstant.now() < deadline
        if checksum == 0 { print("") }
    }

    func acquireAndRelease() {
        waiterArrived.store(true, ordering: .releasing)
        pthread_mutex_lock(mutex)
        pthread_mutex_unlock(mutex)
    }
}
