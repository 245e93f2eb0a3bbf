import CStallmonCapture
import CStallmonLoopShims
import Foundation
@testable import Stallmon
import StallmonLoop
@testable import StallmonReport
import StallmonTestSupport
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Which thread holds the lock a blocked loop waits for: the layouts (pure), then real locks held by a named thread.
struct LockOwnerLayoutTests {
    private func call(_ op: UInt64, _ value: UInt64) -> SystemCall {
        SystemCall(number: 202, arguments: [0x1000, op, value, 0, 0, 0])
    }

    private func memory(_ words: [UInt32]) -> (UInt64, Int) -> [UInt8]? {
        { address, length in
            guard address == 0x1000 else { return nil }
            let bytes = words.flatMap { word in (0..<4).map { UInt8(truncatingIfNeeded: word >> ($0 * 8)) } }
            return length <= bytes.count ? Array(bytes.prefix(length)) : nil
        }
    }

    @Test func aContendedGlibcMutexNamesItsOwner() {
        // __lock = 2 (contended), __count 0, __owner 4711, __nusers 1, __kind 0; FUTEX_WAIT | PRIVATE for 2.
        let holder = LockOwner.holder(of: call(128, 2), waiter: 100, read: memory([2, 0, 4711, 1, 0]))
        #expect(holder == LockOwner.Holder(kind: "pthread mutex", tid: 4711))
        #expect(LockOwner.holder(of: call(0, 2), waiter: 100, read: memory([2, 0, 4711, 1, 0]))?.tid == 4711)
    }

    @Test func wordsThatDoNotLookLikeALockedMutexAreNotTrusted() {
        #expect(LockOwner.holder(of: call(128, 2), waiter: 100, read: memory([2, 0, 0, 1, 0])) == nil, "no owner")
        #expect(LockOwner.holder(of: call(128, 2), waiter: 100, read: memory([0, 0, 4711, 1, 0])) == nil, "unlocked")
        #expect(LockOwner.holder(of: call(128, 2), waiter: 100, read: memory([2, 0, 4711, 0, 0])) == nil, "no users")
        #expect(LockOwner.holder(of: call(128, 2), waiter: 4711, read: memory([2, 0, 4711, 1, 0])) == nil, "itself")
        #expect(LockOwner.holder(of: call(128, 1), waiter: 100, read: memory([2, 0, 4711, 1, 0])) == nil,
                "not waiting for the contended value")
        // FUTEX_WAIT_BITSET: condition variables and semaphores.
        #expect(LockOwner.holder(of: call(9 | 128, 0), waiter: 100, read: memory([2, 0, 4711, 1, 0])) == nil)
        #expect(LockOwner.holder(of: call(128, 2), waiter: 100, read: { _, _ in nil }) == nil, "unreadable")
    }

    @Test func aPriorityInheritanceFutexHoldsItsOwnersTid() {
        let holder = LockOwner.holder(of: call(6 | 128, 0), waiter: 100, read: memory([0x8000_1267]))
        #expect(holder == LockOwner.Holder(kind: "Mutex (priority-inheritance futex)", tid: 0x1267))
    }

    @Test func aHolderThatExitedIsSaidToHaveExited() {
        let target = WaitTarget.of(call(128, 2), waiter: 100, resolve: { _ in nil },
                                   holder: { _, _ in LockOwner.Holder(kind: "pthread mutex", tid: 4711) },
                                   threadName: { _ in nil })
        #expect(target.target == "pthread mutex 0x1000 held by thread 4711, which has exited")
        #expect(target.holderThread == 4711 && target.holderName == nil)
        let unknown = WaitTarget.of(call(9 | 128, 0), waiter: 100, resolve: { _ in nil }, holder: { _, _ in nil })
        #expect(unknown.target?.hasPrefix("futex 0x1000 (owner unknown") == true)
    }
}

/// What the busy holder runs while it holds the lock: the report must name it.
@inline(never)
func stallmonTestFlushLedger(milliseconds: Int) -> UInt64 {
    let end = MonotonicInstant.now().advanced(by: .milliseconds(milliseconds))
    var accumulator: UInt64 = 1
    while MonotonicInstant.now() < end {
        for value in 0..<1000 { accumulator = accumulator &* 6364136223846793005 &+ UInt64(value) }
    }
    return accumulator
}

/// A thread named `name` that holds a lock until the waiter arrived and `milliseconds` more: `hold` takes the lock,
/// runs its argument, releases. Timed from the waiter's arrival (`waiterArrives()`), not from taking the lock: a loop
/// a loaded machine starts late still waits the whole hold.
private final class LockHolder: Sendable {
    let tid = Atomic<Int32>(0)
    private let arrived = Atomic<Bool>(false)

    /// Called by the waiter just before it takes the lock.
    func waiterArrives() {
        arrived.store(true, ordering: .releasing)
    }

    /// `busy`: the holder computes while it holds the lock (it runs, so its stack is sampled); otherwise it sleeps.
    init(name: String, milliseconds: Int, busy: Bool = false,
         hold: @escaping @Sendable (_ whileHeld: () -> Void) -> Void) {
        let holding = DispatchSemaphore(value: 0)
        let thread = Thread { [self] in
            // As a service's own thread: the test runner's threads may block every signal, and threads inherit that.
            if let number = try? SamplingSignal.default.resolve() {
                var set = sigset_t()
                sigemptyset(&set)
                sigaddset(&set, number)
                pthread_sigmask(SIG_UNBLOCK, &set, nil)
            }
            cstallmon_set_thread_name(name)
            tid.store(cstallmon_gettid(), ordering: .releasing)
            hold {
                holding.signal()
                _ = eventually(timeout: .seconds(30)) { arrived.load(ordering: .acquiring) }  // asleep meanwhile
                if busy {
                    _ = stallmonTestFlushLedger(milliseconds: milliseconds)
                } else {
                    usleep(UInt32(milliseconds * 1000))
                }
            }
        }
        thread.start()
        holding.wait()
    }
}

@Suite(.serialized)
struct LockOwnerMonitorTests {
    private func runStall(_ name: String, _ directory: String, _ block: @escaping @Sendable () -> Void) throws
        -> StallReport
    {
        let loop = try Looper(name: name)
        let monitor = try LooperStallMonitor(loop: loop, configuration: .init(
            detection: .init(threshold: .milliseconds(50)), reports: .init(directory: directory)))
        monitor.start()
        loop.perform(label: "wait", block)
        loop.run(for: .milliseconds(500))
        monitor.stop()
        return try #require(readReports(directory).first)
    }

    @Test func aHeldPthreadMutexNamesItsHolder() throws {
        let directory = makeTemporaryDirectory()
        let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        defer { pthread_mutex_destroy(mutex); mutex.deallocate() }
        let address = UInt(bitPattern: mutex)
        let holder = LockHolder(name: "db-writer", milliseconds: 300) { whileHeld in
            pthread_mutex_lock(UnsafeMutablePointer(bitPattern: address)!)
            whileHeld()
            pthread_mutex_unlock(UnsafeMutablePointer(bitPattern: address)!)
        }
        let report = try runStall("mutex-wait", directory) {
            holder.waiterArrives()
            pthread_mutex_lock(UnsafeMutablePointer(bitPattern: address)!)
            pthread_mutex_unlock(UnsafeMutablePointer(bitPattern: address)!)
        }
        let wait = try #require(report.waitingOn?.first, "\(String(describing: report.waitingOn))")
        #expect(wait.kind == "lock")
        #expect(wait.holderThread == holder.tid.load(ordering: .acquiring))
        #expect(wait.holderName == "db-writer")
        #expect(wait.target == "pthread mutex 0x\(String(address, radix: 16)) held by thread "
                    + "\(holder.tid.load(ordering: .acquiring)) \"db-writer\"")
        // Asleep in clock_nanosleep, which a signal would cut short: described, never signalled.
        #expect(wait.holderWaiting?.hasSuffix("nanosleep") == true, "\(String(describing: wait.holderWaiting))")
        let waited = report.samples.filter { $0.waiting == 0 }
        #expect(!waited.isEmpty)
        // A stack only from a sample that caught it awake (R) just before it unlocked (seen once in repeated runs of
        // the whole suite: 1 of 1 holder stacks), never from one asleep.
        let signalled = waited.filter { $0.holderStatus != nil }
        #expect(wait.holderStack == nil || (!signalled.isEmpty && signalled.allSatisfy { $0.holderState == "R" }),
                "\(waited.map { ($0.holderState ?? "-", $0.holderStatus?.rawValue ?? "-") })")
        // A sample may catch the holder just awake, about to unlock (R, then signalled): never one asleep.
        #expect(waited.filter { $0.holderState == "S" }.allSatisfy { $0.holderStatus == nil },
                "\(waited.map { ($0.holderState ?? "-", $0.holderStatus?.rawValue ?? "-") })")
        #expect(waited.filter { $0.holderState == "S" }.count * 2 > waited.count)
    }

    @Test func aBusyHoldersStackSaysWhatItRan() throws {
        let directory = makeTemporaryDirectory()
        let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        defer { pthread_mutex_destroy(mutex); mutex.deallocate() }
        let address = UInt(bitPattern: mutex)
        let holder = LockHolder(name: "ledger-writer", milliseconds: 300, busy: true) { whileHeld in
            pthread_mutex_lock(UnsafeMutablePointer(bitPattern: address)!)
            whileHeld()
            pthread_mutex_unlock(UnsafeMutablePointer(bitPattern: address)!)
        }
        let report = try runStall("busy-holder", directory) {
            holder.waiterArrives()
            pthread_mutex_lock(UnsafeMutablePointer(bitPattern: address)!)
            pthread_mutex_unlock(UnsafeMutablePointer(bitPattern: address)!)
        }
        let wait = try #require(report.waitingOn?.first, "\(String(describing: report.waitingOn))")
        #expect(wait.holderThread == holder.tid.load(ordering: .acquiring))
        let stack = try #require(wait.holderStack, "\(report.samples.map { ($0.holderState, $0.holderStatus) })")
        #expect(stack.of > 0 && stack.samples > 0)
        #expect(wait.holderTopFrame?.symbol.contains("stallmonTestFlushLedger") == true,
                "\(String(describing: wait.holderTopFrame))")
        let symbols = stack.frames.compactMap { report.frames[$0].symbol }
        #expect(symbols.contains { $0.contains("stallmonTestFlushLedger") }, "\(symbols)")
        // The loop's own stack is the lock wait, not the holder's work.
        #expect(report.hottestStack.map { $0.frames.compactMap { report.frames[$0].symbol } }?
                    .contains { $0.contains("stallmonTestFlushLedger") } == false)
        #expect(report.samples.contains { $0.holderStatus == .ok && $0.holderState == "R" })
    }

    @Test func aHeldSynchronizationMutexNamesItsHolder() throws {
        let directory = makeTemporaryDirectory()
        let shared = SharedMutex()
        let holder = LockHolder(name: "ledger-flush", milliseconds: 300) { whileHeld in
            shared.mutex.withLock { _ in whileHeld() }
        }
        let report = try runStall("swift-mutex-wait", directory) {
            holder.waiterArrives()
            shared.mutex.withLock { $0 += 1 }
        }
        let wait = try #require(report.waitingOn?.first, "\(String(describing: report.waitingOn))")
        #expect(wait.holderThread == holder.tid.load(ordering: .acquiring))
        #expect(wait.holderName == "ledger-flush")
        #expect(wait.target?.hasPrefix("Mutex (priority-inheritance futex)") == true, "\(String(describing: wait.target))")
    }

    @Test func aConditionVariableWaitSaysTheOwnerIsUnknown() throws {
        let directory = makeTemporaryDirectory()
        let report = try runStall("condition-wait", directory) {
            let condition = NSCondition()
            condition.lock()
            _ = condition.wait(until: Date(timeIntervalSinceNow: 0.25))
            condition.unlock()
        }
        let wait = try #require(report.waitingOn?.first, "\(String(describing: report.waitingOn))")
        #expect(wait.kind == "lock")
        #expect(wait.holderThread == nil)
        #expect(wait.target?.contains("owner unknown") == true, "\(String(describing: wait.target))")
    }
}

/// A `Synchronization.Mutex` shared by the holder thread and the loop.
private final class SharedMutex: Sendable {
    let mutex = Mutex(0)
}
