import StallmonLoop
import Testing

@Suite("MonotonicInstant and Duration helpers")
struct MonotonicInstantTests {
    @Test("now() never goes backwards and advances across a sleep")
    func nowIsMonotonic() {
        var previous = MonotonicInstant.now()
        for _ in 0..<1000 {
            let next = MonotonicInstant.now()
            #expect(next >= previous)
            previous = next
        }
        let before = MonotonicInstant.now()
        pause(.milliseconds(5))
        #expect(MonotonicInstant.now().nanoseconds(since: before) >= 5_000_000)
    }

    @Test("advanced(by:) adds and subtracts, saturating at the ends of the clock")
    func advanced() {
        let instant = MonotonicInstant(nanoseconds: 1_000_000_000)
        #expect(instant.advanced(by: .milliseconds(1)).nanoseconds == 1_001_000_000)
        #expect(instant.advanced(by: .milliseconds(-1)).nanoseconds == 999_000_000)
        #expect(instant.advanced(by: .zero) == instant)
        #expect(instant.advanced(by: .seconds(-2)).nanoseconds == 0)
        #expect(MonotonicInstant(nanoseconds: .max - 1).advanced(by: .nanoseconds(5)).nanoseconds == .max)
        #expect(instant.advanced(by: .seconds(Int64.max)).nanoseconds == 1_000_000_000 + UInt64(Int64.max))
        #expect(MonotonicInstant(nanoseconds: UInt64(Int64.max) + 2).advanced(by: .seconds(Int64.max)).nanoseconds == .max)
        #expect(instant.advanced(by: .seconds(Int64.min)).nanoseconds == 0)
    }

    @Test("nanoseconds(since:) is the difference, or zero when the other instant is later")
    func nanosecondsSince() {
        let early = MonotonicInstant(nanoseconds: 100)
        let late = MonotonicInstant(nanoseconds: 350)
        #expect(late.nanoseconds(since: early) == 250)
        #expect(early.nanoseconds(since: late) == 0)
        #expect(early.nanoseconds(since: early) == 0)
    }

    @Test("instants compare by nanoseconds")
    func comparison() {
        #expect(MonotonicInstant(nanoseconds: 1) < MonotonicInstant(nanoseconds: 2))
        #expect(!(MonotonicInstant(nanoseconds: 2) < MonotonicInstant(nanoseconds: 2)))
        #expect(MonotonicInstant(nanoseconds: 7) == MonotonicInstant(nanoseconds: 7))
        #expect(MonotonicInstant(nanoseconds: 7).description == "MonotonicInstant(7ns)")
    }

    @Test("Duration.nanosecondsClamped converts exactly and clamps to Int64")
    func nanosecondsClamped() {
        #expect(Duration.seconds(2).nanosecondsClamped == 2_000_000_000)
        #expect(Duration.milliseconds(1500).nanosecondsClamped == 1_500_000_000)
        #expect(Duration.milliseconds(-1500).nanosecondsClamped == -1_500_000_000)
        #expect(Duration.nanoseconds(-1).nanosecondsClamped == -1)
        #expect(Duration.zero.nanosecondsClamped == 0)
        #expect(Duration.seconds(Int64.max).nanosecondsClamped == .max)
        #expect(Duration.seconds(Int64.min).nanosecondsClamped == .min)
        #expect(Duration.milliseconds(250).milliseconds == 250)
        #expect(Duration.microseconds(1500).milliseconds == 1.5)
    }
}
