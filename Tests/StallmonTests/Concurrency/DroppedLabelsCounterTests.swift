import InMemoryLogging
import Logging
import MetricsTestKit
@testable import Stallmon
import StallmonTestSupport
import Testing

/// Labels dropped when every entry of the table is taken: counted, and said in the log at most once a minute.
struct DroppedLabelsCounterTests {
    static let second: UInt64 = 1_000_000_000

    @Test("drops since the monitor began: the counter gets each, the log a line a minute with those not said yet")
    func countedAndLoggedOnceAMinute() throws {
        let metrics = TestMetrics()
        let logs = InMemoryLogHandler()
        var watch = DroppedLabelsCounter(dropped: 7, logger: Logger(label: "test") { _ in logs }, factory: metrics)
        watch.step(now: 1 * Self.second, dropped: 7)
        #expect(logs.entries.isEmpty, "the 7 before the monitor are not its own")
        watch.step(now: 2 * Self.second, dropped: 40)
        watch.step(now: 3 * Self.second, dropped: 45)
        watch.step(now: 50 * Self.second, dropped: 45)
        #expect(try metrics.expectCounter("stallmon_labels_dropped_total").totalValue == 38)
        #expect(logs.entries.map(\.message.description) == [
            "stallmon: 33 stall labels dropped: more than 4,096 StallLabel scopes were open at once, and stalls in "
                + "the scopes past them carry no label",
        ])
        #expect(logs.entries.first?.level == .warning)
        watch.step(now: 62 * Self.second, dropped: 45)
        #expect(logs.entries.count == 2 && logs.entries.last?.message.description.hasPrefix("stallmon: 5 stall labels") == true,
                "the 5 not said yet, a minute after the first line")
        watch.step(now: 200 * Self.second, dropped: 45)
        #expect(logs.entries.count == 2, "nothing new, nothing said")
    }
}
