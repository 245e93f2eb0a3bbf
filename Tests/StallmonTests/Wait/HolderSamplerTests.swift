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

/// A thread that runs `work` until told to stop, then exits.
private final class BusyThread: @unchecked Sendable {
    let tid = Atomic<Int32>(0)
    let stop = Atomic<Bool>(false)
    let exited = DispatchSemaphore(value: 0)

    init(_ work: @escaping @Sendable (_ thread: BusyThread) -> Void) {
        Thread.detachNewThread { [self] in
            // As a service's own thread: the test runner's threads block every signal, and threads inherit that.
            var set = sigset_t()
            sigemptyset(&set)
            sigaddset(&set, cstallmon_installed_signal())
            pthread_sigmask(SIG_UNBLOCK, &set, nil)
            tid.store(cstallmon_gettid(), ordering: .releasing)
            work(self)
            exited.signal()
        }
        while tid.load(ordering: .acquiring) == 0 { usleep(1000) }
    }

    func finish() {
        stop.store(true, ordering: .releasing)
        exited.wait()
    }
}

@inline(never)
private func stallmonTestHolderSpin(_ thread: BusyThread) {
    var accumulator: UInt64 = 1
    while !thread.stop.load(ordering: .relaxed) {
        for value in 0..<1000 { accumulator = accumulator &* 6364136223846793005 &+ UInt64(value) }
    }
    if accumulator == 42 { print("") }
}

/// The holder of a lock the loop waits for is a thread stallmon does not own: sampled only when a signal cannot
/// change what it does, never twice while a handler is owed, and its borrowed slots always come back.
@Suite(.serialized)
struct HolderSamplerTests {
    @Test func aRunningHolderIsSampledAndItsSlotComesBack() throws {
        _ = try StackCaptureTests.installDefaultSignal()
        defer { cstallmon_release() }
        let holder = BusyThread { stallmonTestHolderSpin($0) }
        let tid = holder.tid.load(ordering: .acquiring)
        let sampler = HolderSampler(maxFrames: 64, timeout: .milliseconds(200), stacks: true)
        var looks = ThreadSampler()
        let sample = sampler.sample(tid, sampler: &looks)
        #expect(sample.state == "R")
        #expect(sample.status == .ok)
        #expect(!sample.frames.isEmpty)
        let symbolicator = Symbolicator()
        let symbols = sample.frames.prefix(4).enumerated().compactMap {
            symbolicator.symbolize($1, isReturnAddress: $0 > 0).symbol
        }
        #expect(symbols.contains { $0.contains("stallmonTestHolderSpin") }, "\(symbols)")
        let borrowed = sampler.borrowedSlots
        #expect(borrowed.count == 1)
        #expect(sampler.sample(tid, sampler: &looks).status == .ok)
        #expect(sampler.borrowedSlots == borrowed, "one slot per holder per stall")
        sampler.endStall()
        #expect(sampler.borrowedSlots.isEmpty)
        #expect(borrowed.allSatisfy { cstallmon_slot_is_free($0) == 1 })
        holder.finish()
    }

    @Test func aSleepingHolderIsNotSignalledSoItsSleepIsNotCutShort() throws {
        _ = try StackCaptureTests.installDefaultSignal()
        defer { cstallmon_release() }
        let slept = Atomic<Int64>(0)
        let holder = BusyThread { _ in
            let start = cstallmon_monotonic_ns()
            usleep(300_000)
            slept.store(Int64(cstallmon_monotonic_ns() - start), ordering: .releasing)
        }
        let tid = holder.tid.load(ordering: .acquiring)
        #expect(eventually { ThreadStats.state(tid: tid) == "S" })
        let sampler = HolderSampler(maxFrames: 64, timeout: .milliseconds(200), stacks: true)
        var looks = ThreadSampler()
        for _ in 0..<5 {
            let sample = sampler.sample(tid, sampler: &looks)
            guard sample.state == "S" else { continue }
            #expect(sample.status == nil, "signalled a thread asleep in a call the signal would cut short")
            #expect(sample.waiting?.hasSuffix("nanosleep") == true, "\(String(describing: sample.waiting))")
            usleep(10_000)
        }
        sampler.endStall()
        holder.exited.wait()
        #expect(slept.load(ordering: .acquiring) >= 290_000_000)
    }

    /// `read`/`recv` on a socket with a receive timeout (`SO_RCVTIMEO`) is not restarted after a handler installed
    /// with `SA_RESTART`: it fails with EINTR (signal(7)). Such a holder must not be signalled (issue 26, item 11).
    @Test func aHolderInARecvWithATimeoutIsNotSignalled() throws {
        _ = try StackCaptureTests.installDefaultSignal()
        defer { cstallmon_release() }
        var pair: [Int32] = [0, 0]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0)
        defer { close(pair[0]); close(pair[1]) }
        var timeout = timeval(tv_sec: 0, tv_usec: 400_000)
        try #require(setsockopt(pair[0], SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size)) == 0)
        let reader = pair[0]
        let outcome = Atomic<Int32>(-2)  // the recv's errno (EAGAIN: timed out, as it should; EINTR: cut short)
        let holder = BusyThread { _ in
            var byte: UInt8 = 0
            let got = recv(reader, &byte, 1, 0)
            outcome.store(got < 0 ? errno : 0, ordering: .releasing)
        }
        let tid = holder.tid.load(ordering: .acquiring)
        #expect(eventually { ThreadStats.state(tid: tid) == "S" })
        let call = try #require(SystemCall.current(tid: tid))
        #expect(!call.restartsAfterSignal, "\(call.name) on a socket with SO_RCVTIMEO is not restarted")
        let sampler = HolderSampler(maxFrames: 64, timeout: .milliseconds(200), stacks: true)
        var looks = ThreadSampler()
        for _ in 0..<5 {
            let sample = sampler.sample(tid, sampler: &looks)
            guard sample.state == "S" else { continue }
            #expect(sample.status == nil, "signalled a thread whose recv the signal would cut short")
            usleep(10_000)
        }
        sampler.endStall()
        holder.exited.wait()
        #expect(outcome.load(ordering: .acquiring) == EAGAIN, "the recv timed out instead of failing with EINTR")
        // The same call on a socket without a timeout is restarted.
        let plain = SystemCall(number: call.number, arguments: [UInt64(pair[1])] + call.arguments.dropFirst())
        #expect(plain.restartsAfterSignal)
    }

    @Test func aHolderThatBlocksTheSignalIsNeverSignalled() throws {
        let number = try StackCaptureTests.installDefaultSignal()
        defer { cstallmon_release() }
        let parked = ParkedThread(blocking: number)
        let tid = parked.tid.load(ordering: .acquiring)
        let sampler = HolderSampler(maxFrames: 64, timeout: .milliseconds(20), stacks: true)
        var looks = ThreadSampler()
        let sample = sampler.sample(tid, sampler: &looks)
        #expect(sample.status == nil)
        #expect(sample.state == "S")
        #expect(sample.waiting?.contains("owner unknown") == true, "\(String(describing: sample.waiting))")
        #expect(sampler.borrowedSlots.isEmpty, "no slot taken for a thread that blocks the signal")
        sampler.endStall()
        parked.unblock.signal()
        parked.exit.signal()
        parked.exited.wait()
    }

    @Test func aHolderThatExitedIsRecordedAsGone() throws {
        _ = try StackCaptureTests.installDefaultSignal()
        defer { cstallmon_release() }
        let holder = BusyThread { _ in }
        let tid = holder.tid.load(ordering: .acquiring)
        holder.exited.wait()
        #expect(eventually { ThreadStats.state(tid: tid) == nil })
        let sampler = HolderSampler(maxFrames: 64, timeout: .milliseconds(50), stacks: true)
        var looks = ThreadSampler()
        let sample = sampler.sample(tid, sampler: &looks)
        #expect(sample.state == nil)
        #expect(sample.status == nil)
        sampler.endStall()
    }

    @Test func stacksOffRecordsOnlyTheState() throws {
        _ = try StackCaptureTests.installDefaultSignal()
        defer { cstallmon_release() }
        let holder = BusyThread { stallmonTestHolderSpin($0) }
        let sampler = HolderSampler(maxFrames: 64, timeout: .milliseconds(200), stacks: false)
        var looks = ThreadSampler()
        let sample = sampler.sample(holder.tid.load(ordering: .acquiring), sampler: &looks)
        #expect(sample.state == "R")
        #expect(sample.status == nil)
        holder.finish()
    }

    /// The loop's own slot and a slot borrowed on the same thread (it holds a lock another loop waits for): while
    /// one has a handler owed, the other must not signal the thread.
    @Test func aSecondSlotOfAThreadWithAHandlerOwedDoesNotSignalIt() throws {
        let number = try StackCaptureTests.installDefaultSignal()
        defer { cstallmon_release() }
        let parked = ParkedThread(blocking: number)
        let tid = parked.tid.load(ordering: .acquiring)
        let own = cstallmon_slot_acquire(tid)
        let borrowed = cstallmon_slot_acquire(tid)
        #expect(own >= 0 && borrowed >= 0 && own != borrowed)
        let first = StackCapturer(slot: own, maxFrames: 64, timeout: .milliseconds(20))
        let second = StackCapturer(slot: borrowed, maxFrames: 64, timeout: .milliseconds(20))
        #expect(first.capture(labelID: 0).status == .timedOut)
        #expect(second.capture(labelID: 0).status == .pending)
        parked.unblock.signal()  // the one signal sent is delivered; its handler drains the abandoned slot
        #expect(eventually { first.capture(labelID: 0).status == .ok })
        #expect(second.capture(labelID: 0).status == .ok)
        parked.exit.signal()
        parked.exited.wait()
        #expect(cstallmon_slot_release(own) == 1)
        #expect(cstallmon_slot_release(borrowed) == 1)
    }

    /// A borrowed slot released while its handler is still owed (the holder blocks the signal after all) stays
    /// taken, and is reaped once the thread exits: the signal it was owed died with it.
    @Test func aSlotReleasedWithAHandlerOwedIsReapedWhenItsThreadExits() throws {
        let number = try StackCaptureTests.installDefaultSignal()
        defer { cstallmon_release() }
        let tid = Atomic<Int32>(0)
        let exit = DispatchSemaphore(value: 0)
        let exited = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            var set = sigset_t()
            sigemptyset(&set)
            sigaddset(&set, number)
            pthread_sigmask(SIG_BLOCK, &set, nil)
            tid.store(cstallmon_gettid(), ordering: .releasing)
            exit.wait()
            exited.signal()  // and exits with the signal still blocked and pending
        }
        while tid.load(ordering: .acquiring) == 0 { usleep(1000) }
        let slot = cstallmon_slot_acquire(tid.load(ordering: .acquiring))
        let capturer = StackCapturer(slot: slot, maxFrames: 64, timeout: .milliseconds(20))
        #expect(capturer.capture(labelID: 0).status == .timedOut)
        #expect(cstallmon_slot_release(slot) == 0)
        #expect(cstallmon_slot_reap(slot) == 0)
        #expect(cstallmon_slot_is_free(slot) == 0)
        exit.signal()
        exited.wait()
        #expect(eventually { cstallmon_slot_reap(slot) == 1 })
        #expect(cstallmon_slot_is_free(slot) == 1)
    }
}
