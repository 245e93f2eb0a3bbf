/// At most `limit` full reports per signature per `window`; further stalls are only counted.
struct SignatureRateLimiter: Sendable {
    let limit: Int
    let window: UInt64
    private var written: [String: [UInt64]] = [:]
    private var suppressed: [String: Int] = [:]

    init(limit: Int, window: UInt64) {
        self.limit = limit
        self.window = window
    }

    /// Whether a stall with `signature` at `now` gets a full report. When it does, returns how many stalls of the
    /// signature were suppressed since the previous full one.
    mutating func admit(_ signature: String, now: UInt64) -> (write: Bool, suppressedBefore: Int) {
        var times = (written[signature] ?? []).filter { now < $0 || now - $0 < window }
        defer { written[signature] = times }
        guard times.count < limit else {
            suppressed[signature, default: 0] += 1
            return (false, 0)
        }
        times.append(now)
        let before = suppressed.removeValue(forKey: signature) ?? 0
        if written.count > 10_000 { written = written.filter { !$0.value.isEmpty } }
        return (true, before)
    }
}
