import CStallmonLoopShims
import Foundation
@testable import Stallmon
import Testing

/// The waits `stop()` and snapshots bound run on CLOCK_MONOTONIC (issue 41, item 7: `SnapshotCoordinator` waited on
/// the wall clock, so a clock stepped back unbounded `stop()`).
struct MonotonicConditionTests {
    /// A deadline on CLOCK_MONOTONIC (seconds since boot) read as CLOCK_REALTIME would be in 1970: the wait would
    /// time out at once, before the deadline. It times out only once the monotonic clock reached it.
    @Test func aTimedWaitEndsAtItsMonotonicDeadline() {
        let condition = MonotonicCondition()
        condition.lock()
        let deadline = cstallmon_monotonic_ns() + 20_000_000
        var timedOut = false
        while !timedOut { timedOut = !condition.wait(until: deadline) }  // a spurious wake-up waits again
        condition.unlock()
        #expect(cstallmon_monotonic_ns() >= deadline)
    }

    @Test func aBroadcastEndsTheWait() async {
        let condition = MonotonicCondition()
        let woken = ManagedFlag()
        let waiter = Thread {
            condition.lock()
            while !woken.value { _ = condition.wait(until: cstallmon_monotonic_ns() + 10_000_000_000) }
            condition.unlock()
        }
        waiter.start()
        try? await Task.sleep(for: .milliseconds(20))
        condition.lock()
        woken.value = true
        condition.broadcast()
        condition.unlock()
        #expect(woken.value)
    }

    final class ManagedFlag: @unchecked Sendable {
        var value = false
    }
}
