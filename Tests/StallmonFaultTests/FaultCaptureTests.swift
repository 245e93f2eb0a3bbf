import CStallmonCapture
import CStallmonLoopShims
import Foundation
@testable import Stallmon
import StallmonLoop
@testable import StallmonReport
import StallmonTestSupport
@testable import StallmonUpload
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// How a run of captures went.
struct CaptureTally: CustomStringConvertible {
    var counts: [CaptureStatus: Int] = [:]
    var calls = 0
    var slowestNanoseconds: UInt64 = 0
    var totalNanoseconds: UInt64 = 0
    var okWithoutFrames = 0

    subscript(status: CaptureStatus) -> Int { counts[status, default: 0] }

    /// Counts one capture that returned `sample` after `elapsed` ns.
    mutating func record(_ sample: RawSample, elapsed: UInt64) {
        calls += 1
        counts[sample.status, default: 0] += 1
        slowestNanoseconds = max(slowestNanoseconds, elapsed)
        totalNanoseconds += elapsed
        if sample.status == .ok && sample.frames.isEmpty { okWithoutFrames += 1 }
    }

    /// Statuses that must never happen to a live thread that does not block the signal.
    var unexpected: Int { calls - self[.ok] - self[.timedOut] - self[.pending] - self[.inLoader] }

    var description: String {
        let statuses = [CaptureStatus.ok, .timedOut, .pending, .signalFailed, .unwindFailed, .notReady, .inLoader]
            .map { "\($0.rawValue) \(self[$0])" }.joined(separator: ", ")
        return "\(calls) captures: \(statuses); slowest \(String(format: "%.3f", Double(slowestNanoseconds) / 1e6)) ms, "
            + "mean \(String(format: "%.3f", Double(totalNanoseconds) / Double(max(calls, 1)) / 1e3)) µs"
    }
}

extension FaultTests {
    /// 1,000 captures of a thread that is doing something hostile to an async-signal handler each time: allocator
    /// churn, loader churn, mutex contention. Every capture must return within its timeout (plus scheduling slack),
    /// most must succeed, and the target must survive and keep going.
    @Suite("Fault: captures under hostile conditions", .serialized)
    struct FaultCaptureHostileTests {
        static let captures = 1000
        static let timeout = Duration.milliseconds(50)
        /// A capture that returns later than its timeout by more than this did not honour its bound. Generous: it
        /// only absorbs scheduling delay on a loaded 2-core machine; a deadlock or an unbounded wait is infinite.
        static let slack = Duration.milliseconds(500)

        /// Captures `target` `captures` times, each bounded, and checks the common expectations.
        static func hammer(_ target: FaultThread, _ context: String) throws -> CaptureTally {
            let tid = target.threadID
            try #require(tid != 0, "\(context): the target thread started")
            let slot = cstallmon_slot_acquire(tid)
            try #require(slot >= 0, "\(context): a capture slot is free")
            defer { cstallmon_slot_release(slot) }
            let capturer = StackCapturer(slot: slot, maxFrames: 128, timeout: timeout)
            var tally = CaptureTally()
            let bound = UInt64((timeout + slack).nanosecondsClamped)
            for index in 0..<captures {
                let start = faultNow()
                let sample = capturer.capture(labelID: 0)
                let elapsed = faultNow() - start
                tally.record(sample, elapsed: elapsed)
                #expect(elapsed <= bound, "\(context): capture \(index) took \(Double(elapsed) / 1e6) ms")
                if elapsed > bound * 4 { break }  // something is badly wrong; do not spend minutes proving it
                // Let the target run between captures; after a timeout, give the late handler time to drain the
                // slot, as the watchdog's sample interval would (otherwise one delay costs a long run of pendings).
                faultSleep(microseconds: sample.status == .ok ? 200 : 2_000)
            }
            print("Fault \(context): \(tally)")
            #expect(tally.calls == captures, "\(context): all \(captures) captures returned")
            #expect(tally.unexpected == 0,
                    "\(context): only ok / timed-out / pending / in-loader for a live thread: \(tally)")
            // A thread inside dlopen/dlclose may hold the loader lock the unwinder needs: such samples are skipped
            // (in-loader) rather than risk a deadlock, which is the point of this suite; the rest must succeed.
            #expect(tally[.ok] + tally[.inLoader] >= captures * 8 / 10, "\(context): most captures resolve: \(tally)")
            #expect(tally[.ok] > 0, "\(context): some captures have a stack: \(tally)")
            #expect(tally.okWithoutFrames == 0, "\(context): an ok capture has frames")
            // The target survived every interruption and still runs; a handler wedged on its stack would stop it.
            #expect(faultThreadExists(tid), "\(context): the target thread is alive")
            #expect(target.isMakingProgress(), "\(context): the target thread makes progress after the captures")
            // The slot is usable again once any late handler has drained it: one more capture completes (the handler
            // ran: a stack, or in-loader for a thread that is almost always inside dlopen/dlclose by design).
            #expect(eventually(timeout: .seconds(5)) {
                let status = capturer.capture(labelID: 0).status
                return status == .ok || status == .inLoader
            }, "\(context): a capture after the run completes")
            return tally
        }

        @Test func faultMallocChurnOnTheTargetThread() throws {
            let signalNumber = try FaultSignal.install()
            defer { cstallmon_release() }
            let corruptions = FaultCounter()
            let target = FaultThread(name: "fault-malloc", unblocking: signalNumber) { thread in
                // Random sizes from a few bytes to past the mmap threshold (128 KiB), touched so pages are real;
                // 64 live blocks freed and replaced in random order.
                var random = SeededRandom(seed: 0xA110C + UInt64(thread.progress.load(ordering: .relaxed)))
                var live = [UnsafeMutableRawPointer?](repeating: nil, count: 64)
                for _ in 0..<2000 {
                    let index = random.below(live.count)
                    if let block = live[index] {
                        // Every block starts with its slot number: a handler that corrupted the heap would show.
                        if block.load(as: UInt8.self) != UInt8(index) { corruptions.increment() }
                        free(block)
                        live[index] = nil
                    } else {
                        let size = random.chance(2) ? random.between(128 << 10 ... 512 << 10) : random.between(1...4096)
                        let block = malloc(size)!
                        memset(block, Int32(index), min(size, 64))
                        live[index] = block
                    }
                    if random.chance(5) {
                        let size = random.between(1...70_000)
                        let index = random.below(live.count)
                        if let grown = realloc(live[index], size) {
                            memset(grown, Int32(index), min(size, 64))
                            live[index] = grown
                        }
                    }
                }
                live.forEach { free($0) }
            }
            defer { #expect(target.stopAndWait(), "the malloc thread stops when asked") }
            _ = try Self.hammer(target, "malloc churn")
            #expect(target.progress.load(ordering: .relaxed) > 10, "the allocator churned")
            #expect(corruptions.value == 0, "no heap block was damaged")
        }

        @Test func faultDlopenChurnOnTheTargetThread() throws {
            let signalNumber = try FaultSignal.install()
            defer { cstallmon_release() }
            let directory = makeTemporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let libraries = try FaultSharedLibrary.build(in: directory, copies: 2)
            let failures = Atomic<Int>(0)
            let wrongResults = Atomic<Int>(0)
            let target = FaultThread(name: "fault-dlopen", unblocking: signalNumber) { thread in
                let path = libraries[thread.progress.load(ordering: .relaxed) % libraries.count]
                guard let handle = dlopen(path, RTLD_NOW | RTLD_LOCAL) else {
                    failures.wrappingAdd(1, ordering: .relaxed)
                    return
                }
                if let symbol = dlsym(handle, "fault_library_work") {
                    typealias Work = @convention(c) (Int32) -> Int32
                    let work = unsafeBitCast(symbol, to: Work.self)
                    if work(20) != 20 * 3 + 7 { wrongResults.wrappingAdd(1, ordering: .relaxed) }
                } else {
                    failures.wrappingAdd(1, ordering: .relaxed)
                }
                if dlclose(handle) != 0 { failures.wrappingAdd(1, ordering: .relaxed) }
            }
            defer { #expect(target.stopAndWait(), "the dlopen thread stops when asked") }
            _ = try Self.hammer(target, "dlopen churn")
            #expect(target.progress.load(ordering: .relaxed) > 10, "the library was opened and closed repeatedly")
            #expect(failures.load(ordering: .relaxed) == 0, "dlopen/dlsym/dlclose never failed")
            #expect(wrongResults.load(ordering: .relaxed) == 0, "the library's function computed right")
        }

        /// The setting of the deadlock libunwind's global cache once caused: one thread unwound while another, also
        /// being unwound, holds the loader's list lock inside dlopen/dlclose. Three targets (two churning the loader,
        /// one computing) are captured at the same time from three threads; every capture must stay bounded.
        @Test func faultConcurrentCapturesWhileTheLoaderChurns() throws {
            let signalNumber = try FaultSignal.install()
            defer { cstallmon_release() }
            let directory = makeTemporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let libraries = try FaultSharedLibrary.build(in: directory, copies: 2)
            let churners = (0..<2).map { index in
                FaultThread(name: "fault-loader-\(index)", unblocking: signalNumber) { thread in
                    let path = libraries[(thread.progress.load(ordering: .relaxed) + index) % libraries.count]
                    if let handle = dlopen(path, RTLD_NOW | RTLD_LOCAL) { dlclose(handle) }
                }
            }
            let computing = FaultThread(name: "fault-compute", unblocking: signalNumber) { _ in
                _ = stallmonTestBusySpin(milliseconds: 1)
            }
            let targets = churners + [computing]
            defer { #expect(targets.map { $0.stopAndWait() }.allSatisfy { $0 }, "every target stops when asked") }
            let perTarget = 2000
            let bound = UInt64((Self.timeout + Self.slack).nanosecondsClamped)
            let slowest = Atomic<UInt64>(0)
            let statuses = Mutex<[CaptureStatus: Int]>([:])
            let finished = DispatchSemaphore(value: 0)
            for target in targets {
                let slot = cstallmon_slot_acquire(target.threadID)
                try #require(slot >= 0)
                Thread.detachNewThread {
                    defer { finished.signal() }
                    let capturer = StackCapturer(slot: slot, maxFrames: 128, timeout: Self.timeout)
                    for _ in 0..<perTarget {
                        let start = faultNow()
                        let status = capturer.capture(labelID: 0).status
                        let elapsed = faultNow() - start
                        slowest.max(elapsed, ordering: .relaxed)
                        statuses.withLock { $0[status, default: 0] += 1 }
                        if elapsed > bound * 4 { break }
                        faultSleep(microseconds: status == .ok || status == .inLoader ? 100 : 2_000)
                    }
                    _ = eventually(timeout: .seconds(5)) {
                        [.ok, .inLoader].contains(capturer.capture(labelID: 0).status)
                    }
                    cstallmon_slot_release(slot)
                }
            }
            // Bounded: a deadlocked handler would keep a capturer waiting for ever.
            let allReturned = (0..<targets.count).allSatisfy { _ in finished.wait(timeout: .now() + 60) == .success }
            #expect(allReturned, "every capturer finished")
            let tally = statuses.withLock { $0 }
            print("Fault concurrent captures, loader churn: \(tally), slowest \(Double(slowest.load(ordering: .relaxed)) / 1e6) ms")
            #expect(slowest.load(ordering: .relaxed) <= bound, "every capture honoured its bound")
            #expect(tally.values.reduce(0, +) == perTarget * targets.count, "every capture returned")
            #expect((tally[.ok] ?? 0) > perTarget / 2, "the computing thread and some churners were unwound: \(tally)")
            #expect(targets.allSatisfy { $0.isMakingProgress() }, "every target still runs")
        }

        @Test func faultMutexContentionAroundTheTargetThread() throws {
            let signalNumber = try FaultSignal.install()
            defer { cstallmon_release() }
            let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
            pthread_mutex_init(mutex, nil)
            // A plain (non-atomic) counter guarded by the mutex: if an interrupted lock or unlock ever let two
            // threads in at once, increments would be lost and the sum below would not match.
            let guarded = UnsafeMutablePointer<Int>.allocate(capacity: 1)
            guarded.initialize(to: 0)
            let shared = FaultPointers(mutex: mutex, counter: guarded)
            let target = FaultThread(name: "fault-mutex-holder", unblocking: signalNumber) { _ in
                pthread_mutex_lock(shared.mutex)
                shared.counter.pointee += 1
                faultSleep(microseconds: 50)  // sampled while holding the lock others wait for
                pthread_mutex_unlock(shared.mutex)
            }
            let hammers = (0..<2).map { index in
                FaultThread(name: "fault-mutex-\(index)", unblocking: nil) { _ in
                    pthread_mutex_lock(shared.mutex)
                    shared.counter.pointee += 1
                    pthread_mutex_unlock(shared.mutex)
                }
            }
            var stopped: Bool?
            defer {
                if stopped == nil { stopped = ([target] + hammers).map { $0.stopAndWait() }.allSatisfy { $0 } }
                if stopped == true {  // a thread that did not stop may still use them: leak rather than free
                    pthread_mutex_destroy(mutex)
                    mutex.deallocate()
                    guarded.deallocate()
                }
            }
            _ = try Self.hammer(target, "mutex contention")
            let targetStopped = target.stopAndWait()
            #expect(targetStopped, "the mutex holder stops when asked (no lock left held)")
            let hammersStopped = hammers.map { $0.stopAndWait() }
            #expect(hammersStopped.allSatisfy { $0 }, "the contenders stop when asked")
            stopped = targetStopped && hammersStopped.allSatisfy { $0 }
            guard stopped == true else { return }
            let increments = target.progress.load(ordering: .relaxed)
                + hammers.reduce(0) { $0 + $1.progress.load(ordering: .relaxed) }
            #expect(guarded.pointee == increments, "mutual exclusion held: \(guarded.pointee) vs \(increments)")
            #expect(hammers.allSatisfy { $0.progress.load(ordering: .relaxed) > 0 }, "the contenders got the lock")
        }
    }

    /// A thread that exits while a signal sent to it is still pending (it blocks the signal): the capture times out
    /// within its bound, the thread is never signalled again, later captures say the thread is gone without waiting,
    /// and the slot is returned. Repeated more times than there are slots, so a slot leaked per exited thread
    /// would make `cstallmon_slot_acquire` fail.
    @Suite("Fault: the target thread exits with a capture pending", .serialized)
    struct FaultCaptureExitTests {
        /// The timeout of the captures that must not wait (a pending signal, a gone thread).
        static let longTimeout = Duration.seconds(2)

        /// A thread that blocks the sampling signal, reports its tid, waits to be released, then exits.
        final class DoomedThread: @unchecked Sendable {
            let tid = Atomic<Int32>(0)
            let release = DispatchSemaphore(value: 0)

            init(blocking signalNumber: Int32) {
                Thread.detachNewThread { [self] in
                    var set = FaultSignal.set(signalNumber)
                    pthread_sigmask(SIG_BLOCK, &set, nil)
                    tid.store(cstallmon_gettid(), ordering: .releasing)
                    _ = release.wait(timeout: .now() + .seconds(30))
                    // Returns with the signal still blocked and pending: the kernel discards it with the thread.
                }
                let deadline = faultNow() + 5_000_000_000
                while tid.load(ordering: .acquiring) == 0 && faultNow() < deadline { usleep(200) }
            }
        }

        static func capture(slot: Int32, timeout: Duration) -> (result: cstallmon_capture_result, nanoseconds: UInt64) {
            var frames = [UInt](repeating: 0, count: 64)
            var result = cstallmon_capture_result()
            let start = faultNow()
            frames.withUnsafeMutableBufferPointer { buffer in
                cstallmon_capture(slot, buffer.baseAddress, 64, timeout.nanosecondsClamped, &result)
            }
            return (result, faultNow() - start)
        }

        @Test func faultThreadExitingWithASignalPendingIsReportedGoneAndItsSlotFreed() throws {
            let signalNumber = try FaultSignal.install()
            defer { cstallmon_release() }
            let timeout = Duration.milliseconds(20)
            let bound = UInt64((timeout + .milliseconds(500)).nanosecondsClamped)
            // More rounds than a block of slots: were slots leaked, the lowest free one would climb out of the first
            // block (slots are handed out lowest first; other suites hold a few at most).
            let rounds = Int(CSTALLMON_SLOTS_PER_BLOCK) + 8
            var slowestTimeout: UInt64 = 0
            var slowestGone: UInt64 = 0
            for round in 0..<rounds {
                let doomed = DoomedThread(blocking: signalNumber)
                let tid = doomed.tid.load(ordering: .acquiring)
                try #require(tid != 0)
                let slot = cstallmon_slot_acquire(tid)
                try #require(slot >= 0 && slot < CSTALLMON_SLOTS_PER_BLOCK,
                             "round \(round): slot \(slot), none leaked by the \(round) before")
                #expect(cstallmon_thread_blocks_signal(tid, signalNumber) == 1)

                if round % 4 != 3 {
                    // The thread exits after the capture gave up.
                    let first = Self.capture(slot: slot, timeout: timeout)
                    #expect(CaptureStatus(first.result.status) == .timedOut,
                            "round \(round): errno \(first.result.error_number), replaced \(first.result.handler_replaced)")
                    #expect(first.nanoseconds <= bound, "round \(round): \(Double(first.nanoseconds) / 1e6) ms")
                    slowestTimeout = max(slowestTimeout, first.nanoseconds)
                    // With a long timeout, so that a test thread preempted on a loaded machine is not taken for one
                    // that waited: a capture that waited would take the whole 2 s.
                    let second = Self.capture(slot: slot, timeout: Self.longTimeout)
                    #expect(CaptureStatus(second.result.status) == .pending,
                            "round \(round): no second signal while the first may still be handled")
                    #expect(second.nanoseconds < UInt64(Self.longTimeout.nanosecondsClamped) / 2, "pending does not wait")
                    doomed.release.signal()
                } else {
                    // The thread exits while the capture is still waiting for its handler.
                    let waiting = Duration.milliseconds(80)
                    // Released once the capture's signal is pending for it (not after a fixed time: a test thread
                    // preempted that long would signal a thread already gone).
                    let releaser = Thread { [doomed] in
                        _ = eventually(timeout: .seconds(10)) { faultSignalPending(signalNumber, tid: tid) }
                        doomed.release.signal()
                    }
                    releaser.start()
                    let first = Self.capture(slot: slot, timeout: waiting)
                    #expect(CaptureStatus(first.result.status) == .timedOut, "round \(round)")
                    let waitingBound = UInt64((waiting + .milliseconds(500)).nanosecondsClamped)
                    #expect(first.nanoseconds <= waitingBound, "round \(round): \(Double(first.nanoseconds) / 1e6) ms")
                }
                try #require(eventually(timeout: .seconds(5)) { !faultThreadExists(tid) }, "round \(round): exited")
                for attempt in 0..<3 {
                    let gone = Self.capture(slot: slot, timeout: Self.longTimeout)
                    #expect(CaptureStatus(gone.result.status) == .signalFailed, "round \(round) attempt \(attempt)")
                    #expect(gone.result.error_number == ESRCH, "round \(round): the thread is gone")
                    #expect(gone.nanoseconds < UInt64(Self.longTimeout.nanosecondsClamped) / 2,
                            "round \(round): a gone thread is reported without waiting for the timeout")
                    slowestGone = max(slowestGone, gone.nanoseconds)
                }
                cstallmon_slot_release(slot)
                let afterRelease = Self.capture(slot: slot, timeout: timeout)
                #expect(CaptureStatus(afterRelease.result.status) == .notReady,
                        "round \(round): a released slot captures nothing")
            }
            print("Fault thread-exit: \(rounds) rounds; slowest timed-out capture "
                + "\(String(format: "%.3f", Double(slowestTimeout) / 1e6)) ms (timeout 20 ms); slowest gone-thread "
                + "capture \(String(format: "%.3f", Double(slowestGone) / 1e6)) ms")
            // After more rounds than a block of slots, a live thread can still get a slot and be captured.
            let survivor = FaultThread(name: "fault-survivor", unblocking: signalNumber) { _ in faultSleep(microseconds: 200) }
            defer { _ = survivor.stopAndWait() }
            let slot = cstallmon_slot_acquire(survivor.threadID)
            try #require(slot >= 0, "slots were all returned")
            #expect(CaptureStatus(Self.capture(slot: slot, timeout: .milliseconds(200)).result.status) == .ok)
            cstallmon_slot_release(slot)
        }
    }
}

/// The mutex and counter shared by the contention test's threads.
struct FaultPointers: @unchecked Sendable {
    let mutex: UnsafeMutablePointer<pthread_mutex_t>
    let counter: UnsafeMutablePointer<Int>
}

/// A small shared library compiled at test time, for dlopen/dlclose churn.
enum FaultSharedLibrary {
    static let source = """
        #include <stdlib.h>
        #include <string.h>

        static int offset;
        static char *scratch;

        __attribute__((constructor)) static void fault_library_load(void) {
            offset = 7;
            scratch = malloc(256);          /* the constructor allocates ... */
            if (scratch) memset(scratch, 1, 256);
        }

        __attribute__((destructor)) static void fault_library_unload(void) {
            free(scratch);                  /* ... and the destructor frees, under the loader lock */
            scratch = NULL;
        }

        __attribute__((noinline)) static int fault_library_inner(int value) {
            volatile int spin = 0;
            for (int i = 0; i < 2000; i++) spin += i;
            return value * 3 + offset + (spin - spin);
        }

        /* Runs until *stop is set: a frame of this library stays on the stack while it is captured. */
        __attribute__((noinline)) int fault_library_spin(volatile int *stop) {
            int value = 0;
            while (!*stop) value = fault_library_inner(value & 0xff);
            return value;
        }

        int fault_library_work(int value) {
            char *temporary = malloc(64);
            int result = fault_library_inner(value);
            free(temporary);
            return result;
        }
        """

    /// Unwind tables placed after `PADDING` bytes of read-only data (`-DPADDING=N`), for two libraries of one mapped
    /// size and different layouts.
    static let paddedSource = """
        #ifndef PADDING
        #define PADDING 64
        #endif
        /* Zeros: read as an unwind table header (its version byte 0), it is rejected rather than followed. */
        __attribute__((used)) const char fault_library_padding[PADDING] = {0};

        __attribute__((noinline)) static int fault_library_inner(int value) {
            volatile int spin = 0;
            for (int i = 0; i < 2000; i++) spin += i;
            return value * 3 + (spin - spin);
        }

        /* The linker's symbol for this object's ELF header: where it was loaded. */
        extern const char __ehdr_start __attribute__((visibility("hidden")));
        unsigned long fault_library_base(void) { return (unsigned long)&__ehdr_start; }

        /* Runs until *stop is set. */
        __attribute__((noinline)) int fault_library_spin(volatile int *stop) {
        #ifdef BIG_FRAME
            volatile char frame[512];  /* another frame shape at the same addresses */
            frame[0] = 1;
        #endif
            int value = 0;
            while (!*stop) value = fault_library_inner(value & 0xff);
            return value;
        }
        """

    /// Compiles `paddedSource` with `flags` (after -O1) into `directory`/lib`name`.so.
    static func build(in directory: String, name: String, flags: [String]) throws -> String {
        try CCompiler.build(paddedSource, named: name, in: directory, output: directory + "/lib\(name).so",
                            flags: ["-shared", "-fPIC", "-O1"] + flags)
    }

    /// Compiles the library `copies` times (distinct files, so they load at different addresses) into `directory`.
    static func build(in directory: String, copies: Int) throws -> [String] {
        try (0..<copies).map { index in
            try CCompiler.build(source, named: "fault_library\(index)", in: directory,
                                output: directory + "/libfault\(index).so", flags: ["-shared", "-fPIC", "-O1"])
        }
    }
}
