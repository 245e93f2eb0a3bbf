import CStallmonCapture
import CStallmonLoopShims
import Foundation
@testable import Stallmon
import StallmonLoop
@testable import StallmonReport
import StallmonTestSupport
import Synchronization
import Testing

/// A thread that blocks the sampling signal until told to unblock it, then parks until told to exit.
final class ParkedThread: @unchecked Sendable {
    let tid = Atomic<Int32>(0)
    let unblock = DispatchSemaphore(value: 0)
    let exit = DispatchSemaphore(value: 0)
    let exited = DispatchSemaphore(value: 0)

    init(blocking signalNumber: Int32) {
        Thread.detachNewThread { [self] in
            var set = sigset_t()
            sigemptyset(&set)
            sigaddset(&set, signalNumber)
            pthread_sigmask(SIG_BLOCK, &set, nil)
            tid.store(cstallmon_gettid(), ordering: .releasing)
            unblock.wait()
            pthread_sigmask(SIG_UNBLOCK, &set, nil)  // the pending signal is delivered here
            self.exit.wait()
            exited.signal()
        }
        while tid.load(ordering: .acquiring) == 0 { usleep(1000) }
    }
}

/// Spins until told to stop, inside a dl_iterate_phdr callback (so holding the loader's list lock).
@inline(never)
func stallmonTestSpinHoldingTheLoaderLock() {
    spinningInLoader.store(true, ordering: .releasing)
    while !stopSpinningInLoader.load(ordering: .relaxed) { sched_yield() }
}

/// Spins with an address inside the dynamic loader stored in its own frame, as real stacks keep stale return
/// addresses of lazy binding (`_dl_runtime_resolve`) in slots that live frames have not overwritten.
@inline(never)
func stallmonTestSpinWithLoaderAddressInFrame(milliseconds: Int, loaderAddress: UInt) -> UInt64 {
    var words = (loaderAddress, loaderAddress, loaderAddress, loaderAddress)
    let end = MonotonicInstant.now().advanced(by: .milliseconds(milliseconds))
    var accumulator = UInt64(words.0 & 1)
    while MonotonicInstant.now() < end {
        for value in 0..<1000 { accumulator = accumulator &* 6364136223846793005 &+ UInt64(value) }
        words.1 = words.2  // keeps the words in this frame's memory
    }
    return accumulator &+ UInt64(words.3 & 1)
}

/// Set to stop `spinInsideDlIteratePhdr`.
private let stopSpinningInLoader = Atomic<Bool>(false)
/// Set once the spin has begun, inside the callback.
private let spinningInLoader = Atomic<Bool>(false)
private let slotReleasedByTheHook = Atomic<Int32>(-1)

@Suite(.serialized)
struct StackCaptureTests {
    /// A new thread inherits its creator's signal mask, and a test may run on a Dispatch worker, which blocks the
    /// sampling signal: a thread to be captured unblocks it first.
    static func unblock(_ signalNumber: Int32) {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, signalNumber)
        pthread_sigmask(SIG_UNBLOCK, &set, nil)
    }

    static func installDefaultSignal() throws -> Int32 {
        let number = try SamplingSignal.default.resolve()
        var message = [CChar](repeating: 0, count: 256)
        #expect(cstallmon_install(number, &message, message.count) == 0)
        return number
    }

    /// In a process of its own (the fixture): here a sampling signal is installed already, so the request was
    /// refused as a second signal and the foreign-handler check was never reached (issue 41, item 8).
    @Test func aSignalWithAForeignHandlerIsRefusedAndNamed() async throws {
        let run = try await ConcurrencyStallMonitorTests.run("foreign-handler")
        #expect(run.status == 0, "\(run.output) \(run.errors)")
        let refusal = try #require(run.value("refused"), "\(run.output)")
        #expect(refusal.contains("SIGRTMIN+6") && refusal.contains("is already taken by another handler"), "\(refusal)")
    }

    @Test func aSecondSamplingSignalInTheSameProcessIsRefused() throws {
        _ = try Self.installDefaultSignal()
        defer { cstallmon_release() }
        let loop = try Looper(name: "other-signal")
        do {
            _ = try LooperStallMonitor(loop: loop, configuration: .init(detection: .init(signal: SamplingSignal(offsetFromRTMin: 7))))
            Issue.record("installed a second signal")
        } catch {
            #expect(error.description.contains("already samples with SIGRTMIN+3"), "\(error.description)")
        }
    }

    @Test func aThreadBlockingTheSignalTimesOutAndIsNotSignalledAgainUntilItsHandlerRan() throws {
        let number = try Self.installDefaultSignal()
        defer { cstallmon_release() }
        let parked = ParkedThread(blocking: number)
        let slot = cstallmon_slot_acquire(parked.tid.load(ordering: .acquiring))
        #expect(slot >= 0)
        #expect(cstallmon_thread_blocks_signal(parked.tid.load(ordering: .acquiring), number) == 1)
        let capturer = StackCapturer(slot: slot, maxFrames: 64, timeout: .milliseconds(20))

        let first = capturer.capture(labelID: 0)
        #expect(first.status == .timedOut)
        let second = capturer.capture(labelID: 0)
        #expect(second.status == .pending, "must not re-signal while the first signal may still be handled")

        parked.unblock.signal()  // the late handler runs and drains the slot
        #expect(eventually { capturer.capture(labelID: 0).status == .ok })
        let third = capturer.capture(labelID: 0)
        #expect(third.status == .ok)
        #expect(!third.frames.isEmpty)
        #expect(third.pauseNanoseconds > 0)
        parked.exit.signal()
        parked.exited.wait()
        cstallmon_slot_release(slot)
    }

    @Test func aThreadThatExitedIsReportedAsGone() throws {
        _ = try Self.installDefaultSignal()
        defer { cstallmon_release() }
        let tid = Atomic<Int32>(0)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            tid.store(cstallmon_gettid(), ordering: .releasing)
            done.signal()
        }
        done.wait()
        let slot = cstallmon_slot_acquire(tid.load(ordering: .acquiring))
        let capturer = StackCapturer(slot: slot, maxFrames: 64, timeout: .milliseconds(50))
        #expect(eventually { capturer.capture(labelID: 0).status == .signalFailed })
        cstallmon_slot_release(slot)
    }

    /// A capture of an actor's drain job asks the handler for the worker's active task and that task's id: the word
    /// at an address, then 8 bytes at an offset from what it holds. Here a thread's own word pointing to a record, then
    /// to an address nothing is mapped at (read as 0, no fault), then no word at all.
    @Test func aCaptureRecordsTheWordItWasAskedForAndWhatItPointsTo() throws {
        let signalNumber = try Self.installDefaultSignal()
        defer { cstallmon_release() }
        let record = UnsafeMutablePointer<UInt64>.allocate(capacity: 8)
        defer { record.deallocate() }
        record.initialize(repeating: 0, count: 8)
        record[4] = 0x1234_5678_9abc_def0
        let word = UnsafeMutablePointer<UInt>.allocate(capacity: 1)
        defer { word.deallocate() }
        word.pointee = UInt(bitPattern: record)
        let tid = Atomic<Int32>(0)
        let stop = Atomic<Bool>(false)
        Thread.detachNewThread {
            Self.unblock(signalNumber)
            tid.store(cstallmon_gettid(), ordering: .releasing)
            while !stop.load(ordering: .relaxed) { _ = stallmonTestBusySpin(milliseconds: 1) }
        }
        defer { stop.store(true, ordering: .relaxed) }
        while tid.load(ordering: .acquiring) == 0 { usleep(1000) }
        let slot = cstallmon_slot_acquire(tid.load(ordering: .acquiring))
        defer { cstallmon_slot_release(slot) }
        let capturer = StackCapturer(slot: slot, maxFrames: 64, timeout: .seconds(1))
        func capture(_ address: UInt) -> (word: UInt, pointed: UInt32)? {
            let (sample, _) = capturer.capture(labelID: 0, framePointers: capturer.framePointerBuffer,
                                               activeTask: address == 0 ? nil : (address, 32))
            return sample.status == .ok ? (sample.activeTask, sample.activeTaskJobId) : nil
        }
        let recorded = try #require(capture(UInt(bitPattern: word)))
        #expect(recorded.word == UInt(bitPattern: record) && recorded.pointed == 0x9abc_def0)
        word.pointee = 0x10  // unmapped
        let unreadable = try #require(capture(UInt(bitPattern: word)))
        #expect(unreadable.word == 0x10 && unreadable.pointed == 0)
        let none = try #require(capture(0))
        #expect(none.word == 0 && none.pointed == 0)
    }

    /// A release while the watchdog is mid-capture (here: right after the handler finished, through the test hook)
    /// used to leave the slot IDLE and retired forever: leaked, since only FREE slots are acquired.
    @Test func aSlotReleasedDuringACaptureIsFreedNotLeaked() throws {
        let number = try Self.installDefaultSignal()
        defer { cstallmon_release() }
        let tid = Atomic<Int32>(0)
        let stop = Atomic<Bool>(false)
        Thread.detachNewThread {
            var set = sigset_t()  // a test runner's threads may inherit a mask that blocks it
            sigemptyset(&set)
            sigaddset(&set, number)
            pthread_sigmask(SIG_UNBLOCK, &set, nil)
            tid.store(cstallmon_gettid(), ordering: .releasing)
            while !stop.load(ordering: .relaxed) { usleep(1000) }
        }
        defer { stop.store(true, ordering: .relaxed) }
        while tid.load(ordering: .acquiring) == 0 { usleep(1000) }
        let slot = cstallmon_slot_acquire(tid.load(ordering: .acquiring))
        try #require(slot >= 0)
        // Only this test's slot: the hook sees every capture of the process, other suites' too.
        slotReleasedByTheHook.store(slot, ordering: .releasing)
        cstallmon_set_test_hook_after_capture { index in
            if index == slotReleasedByTheHook.load(ordering: .acquiring) { cstallmon_slot_release(index) }
        }
        defer { cstallmon_set_test_hook_after_capture(nil) }
        let capturer = StackCapturer(slot: slot, maxFrames: 64, timeout: .milliseconds(500))
        let sample = capturer.capture(labelID: 0)
        #expect(sample.status == .ok)
        #expect(cstallmon_slot_is_free(slot) == 1, "released mid-capture: back to FREE, not leaked")
        // And it is usable again.
        let again = cstallmon_slot_acquire(tid.load(ordering: .acquiring))
        #expect(again >= 0)
        cstallmon_slot_release(again)
    }

    /// The handler runs on whatever alternate signal stack the thread has (SA_ONSTACK), possibly a crash reporter's
    /// small one. Its use is measured on an alternate stack filled with a pattern (the high-water mark after 50
    /// captures of a 40-frame stack): on 64 KiB it unwinds within the documented 12 KiB; on 8 KiB, less than
    /// unwinding needs, it does not unwind (unwind-failed) and stays within 4 KiB, most of it the kernel's signal
    /// frame (saved registers and vector state), which the kernel puts there before any handler runs.
    @Test(arguments: [64, 8])
    func theHandlerFitsAnAlternateSignalStack(kilobytes: Int) throws {
        let number = try Self.installDefaultSignal()
        defer { cstallmon_release() }
        let size = kilobytes << 10
        let stack = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 16)
        defer { stack.deallocate() }
        stack.initializeMemory(as: UInt8.self, repeating: 0xA5, count: size)
        let tid = Atomic<Int32>(0)
        let stop = Atomic<Bool>(false)
        let exited = DispatchSemaphore(value: 0)
        let stackAddress = UInt(bitPattern: stack)
        Thread.detachNewThread {
            var alternate = stack_t(ss_sp: UnsafeMutableRawPointer(bitPattern: stackAddress), ss_flags: 0,
                                    ss_size: size)
            sigaltstack(&alternate, nil)
            var set = sigset_t()
            sigemptyset(&set)
            sigaddset(&set, number)
            pthread_sigmask(SIG_UNBLOCK, &set, nil)
            tid.store(cstallmon_gettid(), ordering: .releasing)
            func deep(_ depth: Int) -> Int {  // ~40 frames to unwind
                if depth == 0 {
                    while !stop.load(ordering: .relaxed) { usleep(200) }
                    return 0
                }
                return deep(depth - 1) &+ 1
            }
            _ = deep(40)
            var disable = stack_t(ss_sp: nil, ss_flags: Int32(SS_DISABLE), ss_size: 0)
            sigaltstack(&disable, nil)
            exited.signal()
        }
        while tid.load(ordering: .acquiring) == 0 { usleep(1000) }
        let slot = cstallmon_slot_acquire(tid.load(ordering: .acquiring))
        try #require(slot >= 0)
        let capturer = StackCapturer(slot: slot, maxFrames: 128, timeout: .milliseconds(500))
        var statuses: [CaptureStatus] = []
        for _ in 0..<50 { statuses.append(capturer.capture(labelID: 0).status) }
        let ok = statuses.filter { $0 == .ok }.count
        stop.store(true, ordering: .relaxed)
        exited.wait()
        cstallmon_slot_release(slot)
        let bytes = stack.assumingMemoryBound(to: UInt8.self)
        let untouched = (0..<size).first { bytes[$0] != 0xA5 } ?? size
        let used = size - untouched
        print("handler stack high-water mark on \(kilobytes) KiB: \(used) bytes; \(ok) of 50 ok")
        #expect(used > 0, "the handler ran on the alternate stack")
        if kilobytes >= 16 {
            #expect(ok >= 45, "\(statuses)")
            #expect(used <= 12 << 10, "handler stack use \(used) bytes")
        } else {
            #expect(statuses.filter { $0 == .unwindFailed }.count >= 45, "skipped, not overflowed: \(statuses)")
            #expect(used <= 4 << 10, "stack use without unwinding, the kernel's signal frame included: \(used) bytes")
        }
    }

    @Test func framesStartAtTheInterruptedFunctionWithoutHandlerFrames() throws {
        let directory = makeTemporaryDirectory()
        let loop = try Looper(name: "frames")
        let monitor = try LooperStallMonitor(loop: loop, configuration: .init(
            detection: .init(threshold: .milliseconds(60)), reports: .init(directory: directory)))
        monitor.start()
        loop.perform(label: "spin") { _ = stallmonTestBusySpin(milliseconds: 200) }
        loop.run(for: .milliseconds(400))
        monitor.stop()
        let report = try #require(readReports(directory).first)
        var spinning = 0
        for sample in report.samples where sample.status == .ok {
            let names = sample.frames.compactMap { report.frames[$0].symbol }
            #expect(!names.contains { $0.contains("sampling_handler") || $0.contains("__restore_rt") },
                    "handler or trampoline frames leaked: \(names.prefix(4))")
            guard let spinDepth = names.firstIndex(where: { $0.contains("stallmonTestBusySpin") }) else {
                // Under load the last sample can land after the block returned, while the loop finishes its pass.
                #expect(names.contains { $0.contains("Looper") }, "a sample outside the spin is the loop's: \(names)")
                continue
            }
            spinning += 1
            // At the top, below at most the clock read it spins on (vDSO, clock_gettime, our shim, now()); handler
            // and trampoline frames would add more and are excluded by name above.
            #expect(spinDepth <= 5, "the spinning function is at the top of the stack: \(names.prefix(6))")
        }
        #expect(spinning * 2 > report.samples.count, "most samples caught the spin")
    }

    @Test func staleLoaderAddressesOnTheStackDoNotHideTheStack() throws {
        let loaderAddress = UInt(bitPattern: dlsym(nil, "__tls_get_addr"))
        try #require(loaderAddress != 0, "__tls_get_addr is in ld.so")
        let directory = makeTemporaryDirectory()
        let loop = try Looper(name: "stale-loader-address")
        let monitor = try LooperStallMonitor(loop: loop, configuration: .init(
            detection: .init(threshold: .milliseconds(50)), reports: .init(directory: directory)))
        monitor.start()
        loop.perform { _ = stallmonTestSpinWithLoaderAddressInFrame(milliseconds: 250, loaderAddress: loaderAddress) }
        loop.run(for: .milliseconds(450))
        monitor.stop()
        #expect(cstallmon_loader_lock_found() == 1, "glibc's loader list lock was found, so no stack scan is needed")
        let report = try #require(readReports(directory).first)
        let unwound = report.samples.filter { $0.status == .ok }.count
        #expect(unwound * 2 > report.samples.count, "most samples have a stack: \(report.samples.map(\.status))")
        #expect(report.frames.contains { $0.symbol?.contains("stallmonTestSpinWithLoaderAddressInFrame") == true })
    }

    /// More threads captured at once than a block of slots (a `.singleton` group on a large host, a wide pool, lock
    /// holders): more blocks are mapped, and a capture through a slot of a later block works (issue 26, item 10).
    @Test func slotsGrowPastTheFirstBlock() throws {
        let signalNumber = try Self.installDefaultSignal()
        defer { cstallmon_release() }
        let threadID = Atomic<Int32>(0)
        let finish = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            Self.unblock(signalNumber)
            threadID.store(cstallmon_gettid(), ordering: .releasing)
            finish.wait()
        }
        defer { finish.signal() }
        while threadID.load(ordering: .acquiring) == 0 { usleep(1000) }
        let tid = threadID.load(ordering: .acquiring)
        let count = Int(CSTALLMON_SLOTS_PER_BLOCK) * 2 + 3
        var slots: [Int32] = []
        defer { for slot in slots { cstallmon_slot_release(slot) } }
        for _ in 0..<count {
            let slot = cstallmon_slot_acquire(tid)
            try #require(slot >= 0, "slot \(slots.count + 1) of \(count)")
            slots.append(slot)
        }
        #expect(Set(slots).count == count)
        let last = try #require(slots.max())
        #expect(last >= CSTALLMON_SLOTS_PER_BLOCK * 2, "the last slots are in the third block: \(last)")
        #expect(cstallmon_slots_in_use() >= Int32(count))
        // A capture of that thread through its slot in the third block: the handler walks every block.
        for slot in slots where slot != last { cstallmon_slot_release(slot) }
        slots = [last]
        let capturer = StackCapturer(slot: last, maxFrames: 64, timeout: .milliseconds(200))
        let sample = capturer.capture(labelID: 0)
        #expect(sample.status == .ok && !sample.frames.isEmpty, "\(sample.status)")
    }

    /// The unwinder reads stallmon's image table, not the loader's list, so unwinding a thread that holds the
    /// list lock (inside dl_iterate_phdr's callback) would not wait for it. It is still skipped while the lock's
    /// address is known: it spares dlclose's own thread while it unmaps objects the table may still list. A thread
    /// in such a callback without the lock's address, and a thread interrupted in loader code that does not hold the
    /// lock, are unwound (the tests below).
    @Test func aThreadHoldingTheLoaderListLockIsNotUnwound() throws {
        let signalNumber = try Self.installDefaultSignal()
        defer { cstallmon_release() }
        typealias Callback = @convention(c) (OpaquePointer?, Int, UnsafeMutableRawPointer?) -> Int32
        typealias IteratePhdr = @convention(c) (Callback, UnsafeMutableRawPointer?) -> Int32
        let symbol = UInt(bitPattern: dlsym(nil, "dl_iterate_phdr"))
        try #require(symbol != 0)
        let iterate = unsafeBitCast(symbol, to: IteratePhdr.self)
        let tid = Atomic<Int32>(0)
        let finished = DispatchSemaphore(value: 0)
        stopSpinningInLoader.store(false, ordering: .relaxed)
        spinningInLoader.store(false, ordering: .relaxed)
        Thread.detachNewThread {
            Self.unblock(signalNumber)
            tid.store(cstallmon_gettid(), ordering: .releasing)
            // dl_iterate_phdr holds the loader's list lock while its callback runs.
            _ = iterate({ _, _, _ in
                stallmonTestSpinHoldingTheLoaderLock()
                return 1
            }, nil)
            finished.signal()
        }
        // Whatever fails below, the thread leaves the loader's lock: every other test of the process needs it.
        defer {
            stopSpinningInLoader.store(true, ordering: .relaxed)
            #expect(finished.wait(timeout: .now() + 10) == .success, "the spinning thread left the loader")
        }
        // Inside the callback (dl_iterate_phdr may first wait for the lock, which other tests' loads take).
        try #require(eventually(timeout: .seconds(30)) { spinningInLoader.load(ordering: .acquiring) })
        let slot = cstallmon_slot_acquire(tid.load(ordering: .acquiring))
        try #require(slot >= 0)
        defer { cstallmon_slot_release(slot) }
        let capturer = StackCapturer(slot: slot, maxFrames: 64, timeout: .milliseconds(200))
        #expect(cstallmon_unwinder_uses_image_table() == 1)
        let samples = (0..<5).map { _ in capturer.capture(labelID: 0) }
        #expect(samples.allSatisfy { $0.status == .inLoader }, "\(samples.map(\.status))")
    }
}
