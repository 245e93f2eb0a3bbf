/// At most `limit` full reports per signature per `window`; further stalls are only counted.
struct SignatureRateLimiter: Sendable {
    let limit: Int
    let window: UInt64
    private var written: [String: [UInt64]] = [:]
    private var suppressed: [String: Int] = [:]
    /// When the map is pruned next: at 10,000 signatures, then at twice what a pruning left, so that a service with
    /// many live signatures prunes rarely (amortised O(1) per admit) rather than at every admit.
    private var pruneAt = Self.minimumPruneAt
    private static let minimumPruneAt = 10_000

    init(limit: Int, window: UInt64) {
        self.limit = limit
        self.window = window
    }

    /// How many signatures are remembered (tests read it).
    var trackedSignatures: Int { written.count }

    /// Whether a stall with `signature` at `now` gets a full report. When it does, returns how many stalls of the
    /// signature were suppressed since the previous full one.
    mutating func admit(_ signature: String, now: UInt64) -> (write: Bool, suppressedBefore: Int) {
        var times = (written[signature] ?? []).filter { isRecent($0, now: now) }
        defer {
            written[signature] = times
            if written.count > pruneAt { prune(now: now) }
        }
        guard times.count < limit else {
            suppressed[signature, default: 0] += 1
            return (false, 0)
        }
        times.append(now)
        let before = suppressed.removeValue(forKey: signature) ?? 0
        return (true, before)
    }

    private func isRecent(_ time: UInt64, now: UInt64) -> Bool { now < time || now - time < window }

    /// Forgets the writes older than the window, and the signatures left with none (with their suppressed counts:
    /// a signature not written within the window admits its next stall anyway).
    private mutating func prune(now: UInt64) {
        var kept: [String: [UInt64]] = [:]
        for (signature, times) in written {
            let recent = times.filter { isRecent($0, now: now) }
            if !recent.isEmpty { kept[signature] = recent }
        }
        written = kept
        suppressed = suppressed.filter { kept[$0.key] != nil }
        pruneAt = max(Self.minimumPruneAt, 2 * kept.count)
    }
}
