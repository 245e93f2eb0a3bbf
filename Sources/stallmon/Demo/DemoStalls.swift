import Foundation
import StallmonLoop
import Synchronization

/// The stalls the demo injects, each in a function with a name you should find at the top of its report.
/// All are real work on the loop thread, not simulations of a stall: CPU, a blocking sleep, a blocking read, a lock
/// held by another thread, a large JSON encode.
enum DemoStalls {
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

    /// Blocking read of a pipe whose writer, another thread, answers only after `milliseconds`.
    @inline(never)
    static func readFromSlowPeer(milliseconds: Int) -> Int {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { return -1 }
        let writer = fds[1]
        Thread.detachNewThread {
            usleep(UInt32(milliseconds) * 1000)
            var byte: UInt8 = 42
            _ = write(writer, &byte, 1)
            close(writer)
        }
        var byte: UInt8 = 0
        var got = -1
        repeat { got = read(fds[0], &byte, 1) } while got < 0 && errno == EINTR
        close(fds[0])
        return got
    }

    /// Waits for a lock that a background thread holds for `milliseconds`.
    @inline(never)
    static func waitForContendedLock(_ lock: ContendedLock, milliseconds: Int) {
        let holding = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
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

    init() {
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    func holdFor(milliseconds: Int, signalWhenHeld: DispatchSemaphore) {
        pthread_mutex_lock(mutex)
        signalWhenHeld.signal()
        usleep(UInt32(milliseconds) * 1000)
        pthread_mutex_unlock(mutex)
    }

    func acquireAndRelease() {
        pthread_mutex_lock(mutex)
        pthread_mutex_unlock(mutex)
    }
}
