import Foundation
import CStallmonLoopShims
@testable import Stallmon
import Testing

/// `FreezeDetector` on a clock and process readings of the test's own: no thread, no sleep. A freeze is judged only from
/// evidence that the whole process did not run (issue 41, item 2: a 30.5 ms "freeze" nobody caused was subtracted
/// from a real 336 ms stall).
struct FreezeDetectorTests {
    static let ms: UInt64 = 1_000_000

    /// The process as the test sets it: CLOCK_MONOTONIC, the watchdog's run delay, the CPU time and voluntary switches
    /// of all its threads, and how many threads it has. `readable` false: /proc gives no schedstat.
    final class ProcessState {
        var now: UInt64 = 10_000 * FreezeDetectorTests.ms
        var progress = ProcessProgress(watchdogRunDelay: 0, processCPU: 0, voluntarySwitches: 0)
        var threads = 8
        var readable = true

        /// What a whole-process stop does to the readings: no CPU, no run delay, two switches per thread (woken into
        /// the stop, asleep again after it).
        func freeze(for nanoseconds: UInt64) {
            now += nanoseconds
            progress.voluntarySwitches += UInt64(2 * threads)
        }
    }

    /// A 100 ms threshold: a freeze is at least 25 ms.
    func makeWatch(_ process: ProcessState) -> FreezeDetector {
        FreezeDetector(thresholdNanoseconds: 100 * Self.ms, clock: { process.now },
                    progress: { process.readable ? process.progress : nil }, threadCount: { process.threads },
                    cpus: 2)
    }

    // MARK: - Real freezes

    @Test func aLateWakeUpAcrossWhichNoThreadRanIsAFreeze() {
        let process = ProcessState()
        var watch = makeWatch(process)
        let began = process.now
        _ = watch.passBegins(now: began)
        process.now += 1 * Self.ms
        #expect(watch.passEnds(began: began, waitedOnItsOwnWork: true, wakeAt: began + 10 * Self.ms) == nil)
        process.now = began + 10 * Self.ms
        process.freeze(for: 700 * Self.ms)  // SIGSTOP while asleep: woken 700 ms late
        #expect(watch.passBegins(now: process.now) == 700 * Self.ms)
        #expect(watch.freezes.count == 1)
    }

    @Test func aPassAcrossWhichNoThreadRanIsAFreeze() {
        let process = ProcessState()
        var watch = makeWatch(process)
        let began = process.now
        _ = watch.passBegins(now: began)
        process.freeze(for: 208 * Self.ms)  // the process was stopped mid-pass
        #expect(watch.passEnds(began: began, waitedOnItsOwnWork: false, wakeAt: began + 10 * Self.ms)
                == 208 * Self.ms)
        #expect(watch.freezes.count == 1)
    }

    /// A busy process stopped while the watchdog slept: its threads ran on both CPUs until the stop, within the
    /// readings' window but outside the gap. Judged against the gap alone, that CPU time hid the freeze (a review of
    /// this first fix).
    @Test func aBusyProcessStoppedWhileTheWatchdogSleptIsAFreeze() {
        let process = ProcessState()
        var watch = makeWatch(process)
        let began = process.now
        _ = watch.passBegins(now: began)
        process.now += 1 * Self.ms
        _ = watch.passEnds(began: began, waitedOnItsOwnWork: false, wakeAt: began + 51 * Self.ms)
        process.now += 50 * Self.ms
        process.progress.processCPU += 100 * Self.ms  // both CPUs busy for the 50 ms sleep
        process.freeze(for: 300 * Self.ms)  // then SIGSTOP: woken 300 ms late
        #expect(watch.passBegins(now: process.now) == 300 * Self.ms)
        #expect(watch.lastVerdict == .frozen)
    }

    /// The evidence is three system calls that walk every thread of the process, the most of an idle pass's cost
    /// (issue 43, item 4). Before: two readings each pass. A pass too short to be judged takes one, at its top; a pass
    /// long enough takes its second at its end.
    @Test func aShortPassTakesOneReadingAndALongOneTwo() {
        let process = ProcessState()
        var readings = 0
        var watch = FreezeDetector(thresholdNanoseconds: 100 * Self.ms, clock: { process.now },
                                   progress: { readings += 1; return process.progress },
                                   threadCount: { process.threads }, cpus: 2)
        readings = 0
        for _ in 0..<10 {
            let began = process.now
            _ = watch.passBegins(now: began)
            process.now += 1 * Self.ms
            #expect(watch.passEnds(began: began, waitedOnItsOwnWork: false, wakeAt: began + 50 * Self.ms) == nil)
            process.now = began + 50 * Self.ms
        }
        #expect(readings == 10, "one reading a short pass")
        let began = process.now
        _ = watch.passBegins(now: began)
        process.now += 30 * Self.ms
        process.progress.processCPU += 30 * Self.ms  // a long pass, the process running
        #expect(watch.passEnds(began: began, waitedOnItsOwnWork: false, wakeAt: began + 80 * Self.ms) == nil)
        #expect(readings == 12, "a long pass is judged on a reading at its end")
        #expect(watch.lastVerdict == .processRan)
    }

    /// With one reading a pass, a late wake-up after a short pass is judged over a window that reaches back to the
    /// pass's top: a freeze there is still one, and a process that ran across the gap is still no freeze.
    @Test func aLateWakeUpAfterAShortPassIsJudgedFromThePassesTop() {
        let process = ProcessState()
        var watch = makeWatch(process)
        var began = process.now
        _ = watch.passBegins(now: began)
        process.now += 2 * Self.ms
        process.progress.processCPU += 2 * Self.ms  // the pass's own work
        _ = watch.passEnds(began: began, waitedOnItsOwnWork: false, wakeAt: began + 50 * Self.ms)
        process.now = began + 50 * Self.ms
        process.freeze(for: 200 * Self.ms)
        #expect(watch.passBegins(now: process.now) == 200 * Self.ms)
        began = process.now
        process.now += 2 * Self.ms
        _ = watch.passEnds(began: began, waitedOnItsOwnWork: false, wakeAt: began + 50 * Self.ms)
        process.now = began + 250 * Self.ms  // woken 200 ms late, while both CPUs ran the process
        process.progress.processCPU += 400 * Self.ms
        process.progress.voluntarySwitches += 100
        #expect(watch.passBegins(now: process.now) == nil)
        #expect(watch.lastVerdict == .processRan)
    }

    // MARK: - The watchdog late on its own

    /// Before: when the watchdog's run delay could not be read, its growth counted as 0 and any late wake-up was a
    /// freeze.
    @Test func withoutEvidenceNothingIsJudged() {
        let process = ProcessState()
        process.readable = false
        var watch = makeWatch(process)
        let began = process.now
        _ = watch.passBegins(now: began)
        process.now += 1 * Self.ms
        _ = watch.passEnds(began: began, waitedOnItsOwnWork: false, wakeAt: began + 10 * Self.ms)
        process.freeze(for: 300 * Self.ms)
        #expect(watch.passBegins(now: process.now) == nil)
        #expect(watch.lastVerdict == .noEvidence)
        #expect(watch.freezes.count == 0)
    }

    /// A pass blocked off the CPU (a major page fault, a blocking log handler or metrics backend, the statistics
    /// export's lock) while the stalled thread spins: the process ran. Before: a freeze, set aside from the stall.
    @Test(arguments: ["a major page fault", "a blocking log handler", "a blocking metrics backend",
                      "the statistics export's lock"])
    func aPassBlockedWhileTheProcessRanIsNoFreeze(cause: String) {
        let process = ProcessState()
        var watch = makeWatch(process)
        let began = process.now
        _ = watch.passBegins(now: began)
        process.now += 31 * Self.ms
        process.progress.processCPU += 31 * Self.ms  // the loop thread's stall on the other CPU
        process.progress.voluntarySwitches += 1  // the watchdog's own wait
        #expect(watch.passEnds(began: began, waitedOnItsOwnWork: false, wakeAt: began + 10 * Self.ms) == nil, "\(cause)")
        #expect(watch.lastVerdict == .processRan)
        #expect(watch.freezes.count == 0)
    }

    /// The same while every other thread sleeps (a loop blocked in a read): nothing ran, but only the watchdog switched.
    @Test func aPassBlockedWhileTheOthersSleptIsNoFreeze() {
        let process = ProcessState()
        var watch = makeWatch(process)
        let began = process.now
        _ = watch.passBegins(now: began)
        process.now += 40 * Self.ms
        process.progress.processCPU += 200_000
        process.progress.voluntarySwitches += 2
        #expect(watch.passEnds(began: began, waitedOnItsOwnWork: false, wakeAt: began + 10 * Self.ms) == nil)
        #expect(watch.lastVerdict == .threadsNotStopped)
        // The same for a late wake-up.
        process.now += 5 * Self.ms + 10 * Self.ms
        process.progress.voluntarySwitches += 1
        #expect(watch.passBegins(now: process.now + 30 * Self.ms) == nil)
        #expect(watch.lastVerdict == .threadsNotStopped)
        #expect(watch.freezes.count == 0)
    }

    @Test func aPassLongForWantOfACPUIsNoFreeze() {
        let process = ProcessState()
        var watch = makeWatch(process)
        let began = process.now
        _ = watch.passBegins(now: began)
        process.freeze(for: 208 * Self.ms)
        process.progress.watchdogRunDelay += 150 * Self.ms  // preempted on a loaded machine
        #expect(watch.passEnds(began: began, waitedOnItsOwnWork: false, wakeAt: began + 10 * Self.ms) == nil)
        #expect(watch.lastVerdict == .watchdogWaitedForACPU)
        #expect(watch.freezes.count == 0)
    }

    /// A pass that waited on work of its own (the writer making a hang's report durable, a capture that timed out) is
    /// not judged (issue 32, item 4).
    @Test func aPassThatWaitedOnItsOwnWorkIsNoFreeze() {
        let process = ProcessState()
        var watch = makeWatch(process)
        let began = process.now
        #expect(watch.passBegins(now: began) == nil)
        process.freeze(for: 208 * Self.ms)
        #expect(watch.passEnds(began: began, waitedOnItsOwnWork: true, wakeAt: began + 10 * Self.ms) == nil)
        // The next wake-up is expected at the pass's end (its asked-for wake-up passed during the wait).
        process.now += 1 * Self.ms
        #expect(watch.passBegins(now: process.now) == nil)
        #expect(watch.freezes.count == 0)
        #expect(watch.freezes.overlap(start: began, end: process.now) == 0, "nothing set aside from a stall")
    }

    /// On this process, for real: the watchdog-like thread blocks off the CPU for 60 ms (as in a lock or a page
    /// fault) while another thread spins, as a stalled loop does. Before: judged a 60 ms freeze.
    @Test func aRealBlockedPassWhileAThreadSpinsIsNoFreeze() throws {
        try #require(ProcessProgress.read() != nil, "this kernel gives the evidence (schedstat)")
        let spinning = Spinner()
        spinning.start()
        defer { spinning.stop() }
        #expect(spinning.waitUntilSpinning())
        var watch = FreezeDetector(thresholdNanoseconds: 100 * Self.ms)
        let began = cstallmon_monotonic_ns()
        _ = watch.passBegins(now: began)
        usleep(60_000)
        #expect(watch.passEnds(began: began, waitedOnItsOwnWork: false, wakeAt: began + 10 * Self.ms) == nil)
        #expect(watch.freezes.count == 0, "\(String(describing: watch.lastVerdict))")
    }

    /// A thread that spins until stopped.
    final class Spinner: @unchecked Sendable {
        private let lock = NSCondition()
        private var running = false
        private var stopping = false
        private var thread: Thread?

        func start() {
            let thread = Thread { [self] in
                lock.lock(); running = true; lock.broadcast(); lock.unlock()
                var sum = 0
                while true {
                    for index in 0..<10_000 { sum &+= index }
                    lock.lock(); let stop = stopping; lock.unlock()
                    if stop { break }
                }
                _ = sum
            }
            self.thread = thread
            thread.start()
        }

        func waitUntilSpinning() -> Bool {
            lock.lock(); defer { lock.unlock() }
            let deadline = Date().addingTimeInterval(10)
            while !running { guard lock.wait(until: deadline) else { return false } }
            return true
        }

        func stop() {
            lock.lock(); stopping = true; lock.unlock()
        }
    }

    // MARK: - What a finished stall sets aside (issue 32, item 7)

    /// A "freeze" the stalled thread ran through (the watchdog woke late, its CPU taken away, while the thread spun
    /// on the other) is not subtracted: the thread's CPU time bounds it. Before, a 20 ms late wake-up made a report
    /// 20 ms short.
    @Test func aFreezeTheStalledThreadRanThroughIsNotSetAside() {
        let ms = Self.ms
        #expect(StallTracker.frozenTime(overlapBeforeBaseline: 0, overlapAfterBaseline: 20 * ms, window: 100 * ms,
                                        cpu: 99 * ms, runDelay: 1 * ms) == 0)
        // Running most of the window: only what is left could have been a freeze.
        #expect(StallTracker.frozenTime(overlapBeforeBaseline: 0, overlapAfterBaseline: 20 * ms, window: 100 * ms,
                                        cpu: 90 * ms, runDelay: 5 * ms) == 5 * ms)
    }

    /// A real freeze (SIGSTOP, a container freeze) stops the thread too: its CPU time does not grow, so all of it is
    /// set aside; before the stall was detected, the freezes stand as the watchdog saw them.
    @Test func aRealFreezeIsSetAsideWhole() {
        let ms = Self.ms
        #expect(StallTracker.frozenTime(overlapBeforeBaseline: 0, overlapAfterBaseline: 700 * ms, window: 1_000 * ms,
                                        cpu: 290 * ms, runDelay: 10 * ms) == 700 * ms)
        #expect(StallTracker.frozenTime(overlapBeforeBaseline: 30 * ms, overlapAfterBaseline: 0, window: 100 * ms,
                                        cpu: 100 * ms, runDelay: 0) == 30 * ms)
        #expect(StallTracker.frozenTime(overlapBeforeBaseline: 0, overlapAfterBaseline: 50 * ms, window: 100 * ms,
                                        cpu: 0, runDelay: 0) == 50 * ms, "a sleeping thread: the freezes stand")
    }

    @Test func freezesOverlapWhatTheyCover() {
        var tracker = FreezeTracker()
        tracker.record(start: 1000, end: 1600)
        #expect(tracker.overlap(start: 1200, end: 5000) == 400)
        #expect(tracker.count == 1)
    }
}
