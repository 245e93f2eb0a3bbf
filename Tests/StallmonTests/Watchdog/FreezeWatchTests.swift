@testable import Stallmon
import Testing

/// `FreezeWatch` on a clock and a run delay of the test's own: no thread, no sleep. A pass that waited on work of its
/// own (the writer making a hang's report durable, a capture that timed out) is no freeze (issue 32, item 4: a hang's
/// 208 ms durable write was taken for one and subtracted from the stall).
struct FreezeWatchTests {
    static let ms: UInt64 = 1_000_000

    /// The watchdog thread as the test sets it: CLOCK_MONOTONIC, and how long it has waited for a CPU in all.
    final class WatchdogThreadState {
        var now: UInt64 = 10_000 * FreezeWatchTests.ms
        var runDelay: UInt64 = 0
    }

    /// A 100 ms threshold: a freeze is at least 25 ms.
    func makeWatch(_ thread: WatchdogThreadState) -> FreezeWatch {
        FreezeWatch(thresholdNanoseconds: 100 * Self.ms, clock: { thread.now }, ownRunDelay: { thread.runDelay })
    }

    @Test func aPassThatWaitedOnItsOwnWorkIsNoFreeze() {
        let thread = WatchdogThreadState()
        var watch = makeWatch(thread)
        let began = thread.now
        #expect(watch.passBegins(now: began) == nil)
        thread.now += 208 * Self.ms  // asleep in the writer's flush: no run delay, as in a freeze
        #expect(watch.passEnds(began: began, waitedOnItsOwnWork: true, wakeAt: began + 10 * Self.ms) == nil)
        // The next wake-up is expected at the pass's end (its asked-for wake-up passed during the wait).
        thread.now += 1 * Self.ms
        #expect(watch.passBegins(now: thread.now) == nil)
        #expect(watch.freezes.count == 0)
        #expect(watch.freezes.overlap(start: began, end: thread.now) == 0, "nothing set aside from a stall")
    }

    @Test func aPassAsLongThatWaitedOnNothingOfItsOwnIsAFreeze() {
        let thread = WatchdogThreadState()
        var watch = makeWatch(thread)
        let began = thread.now
        _ = watch.passBegins(now: began)
        thread.now += 208 * Self.ms  // the process was stopped mid-pass
        #expect(watch.passEnds(began: began, waitedOnItsOwnWork: false, wakeAt: began + 10 * Self.ms)
                == 208 * Self.ms)
        #expect(watch.freezes.count == 1)
    }

    @Test func aPassLongForWantOfACPUIsNoFreeze() {
        let thread = WatchdogThreadState()
        var watch = makeWatch(thread)
        let began = thread.now
        _ = watch.passBegins(now: began)
        thread.now += 208 * Self.ms
        thread.runDelay += 150 * Self.ms  // preempted on a loaded machine
        #expect(watch.passEnds(began: began, waitedOnItsOwnWork: false, wakeAt: began + 10 * Self.ms) == nil)
        #expect(watch.freezes.count == 0)
    }

    @Test func aLateWakeUpIsAFreezeWhateverThePassBeforeWaitedOn() {
        let thread = WatchdogThreadState()
        var watch = makeWatch(thread)
        let began = thread.now
        _ = watch.passBegins(now: began)
        thread.now += 1 * Self.ms
        #expect(watch.passEnds(began: began, waitedOnItsOwnWork: true, wakeAt: began + 10 * Self.ms) == nil)
        thread.now = began + 710 * Self.ms  // SIGSTOP while asleep: woken 700 ms late
        #expect(watch.passBegins(now: thread.now) == 700 * Self.ms)
        #expect(watch.freezes.count == 1)
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
}
