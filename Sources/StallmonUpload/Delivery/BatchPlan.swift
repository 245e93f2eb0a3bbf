import Stallmon
import StallmonReport

/// When a batch is due and which entries it takes.
struct BatchPlan: Equatable {
    enum Decision: Equatable {
        /// Nothing pending.
        case idle
        /// Send these now.
        case send([SpoolEntry])
        /// Wait until this time (epoch ns) for more reports.
        case wait(until: UInt64)
        /// This entry alone exceeds the body limit: it can never be sent.
        case tooLarge(SpoolEntry)
    }

    var maxReports: Int
    var maxAgeNanoseconds: UInt64
    var maxBodyBytes: Int

    /// A batch is due at `maxReports` entries or `maxAgeNanoseconds` after its oldest, whichever comes first (or at
    /// once when `flush`), and never holds more than `maxBodyBytes` of reports.
    func decide(_ pending: [SpoolEntry], now: UInt64, flush: Bool) -> Decision {
        guard let oldest = pending.first else { return .idle }
        if oldest.bytes > maxBodyBytes { return .tooLarge(oldest) }
        let dueAt = oldest.spooledAt &+ maxAgeNanoseconds
        guard flush || pending.count >= maxReports || now >= dueAt else { return .wait(until: dueAt) }
        var batch: [SpoolEntry] = []
        var bytes = 0
        for entry in pending.prefix(maxReports) {
            // A sparse file can claim any size: an entry past what the body holds ends the batch, the sum never overflows.
            if entry.bytes > maxBodyBytes - bytes { break }
            batch.append(entry)
            bytes += entry.bytes
        }
        return .send(batch)
    }
}
