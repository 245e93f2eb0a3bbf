import Logging
import Metrics

/// Labels dropped because every entry of the table was taken (more than 4,096 `StallLabel` scopes open at once):
/// their stalls carry no label, and a scope never waits for an entry. The pool's source reads the count at each pass;
/// what it grew by goes to `stallmon_labels_dropped_total` and, at most once a minute, to the log.
struct DroppedLabelsCounter {
    static let logInterval: UInt64 = 60_000_000_000

    private let counter: Counter
    private let logger: Logger
    private var seen: UInt64
    private var notLogged: UInt64 = 0
    private var loggedAt: UInt64?

    /// `dropped`: the count now (`cstallmon_labels_dropped`); only drops after it are reported.
    init(dropped: UInt64, logger: Logger, factory: any MetricsFactory = MetricsSystem.factory) {
        seen = dropped
        self.logger = logger
        counter = Counter(label: "stallmon_labels_dropped_total", factory: factory)
    }

    mutating func step(now: UInt64, dropped: UInt64) {
        if dropped > seen {
            counter.increment(by: Int64(clamping: dropped - seen))
            notLogged += dropped - seen
            seen = dropped
        }
        guard notLogged > 0, loggedAt.map({ now &- $0 >= Self.logInterval }) ?? true else { return }
        logger.warning("""
            stallmon: \(notLogged) stall labels dropped: more than 4,096 StallLabel scopes were open at once, and \
            stalls in the scopes past them carry no label
            """)
        notLogged = 0
        loggedAt = now
    }
}
