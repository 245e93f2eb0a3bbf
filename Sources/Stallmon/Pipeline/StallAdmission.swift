/// Whether a stall's reports are written, under `max_reports_per_signature_per_hour`: the rate limit is asked once
/// per stall, at its first report (its interim, if it had one), so a long stall counts once and its final follows its
/// interim (written, or suppressed as the interim was). A hang's report is always written. Pure: the clock is handed
/// in, nothing is read or written; the writer thread owns one.
struct StallAdmission {
    /// Write the report or not; when written, how many stalls of its signature were suppressed since the last one
    /// written (the report says so).
    struct Decision: Equatable {
        var write: Bool
        var suppressedBefore: Int
    }

    /// Decisions of stalls whose first report was written or suppressed and whose final has not come yet.
    private var decided: [String: Decision] = [:]
    /// One limiter per configured limit: a signature counts across every loop of the pipeline.
    private var limiters: [Int: SignatureRateLimiter] = [:]
    /// The limit's window: an hour.
    static let window: UInt64 = 3600 * 1_000_000_000

    /// An interim report of stall `id`: the decision taken at the stall's first report, asked now if this is it.
    /// Nil: no decision (the report has no signature, or one of the stall's reports was already published without
    /// one): write it.
    mutating func interim(_ id: String, signature: String?, alreadyPublished: Bool, limit: Int,
                          now: UInt64) -> Decision? {
        if decided[id] == nil, !alreadyPublished, let signature {
            decided[id] = ask(signature, limit: limit, now: now)
        }
        return decided[id]
    }

    /// A hang's report of stall `id`: always written (the evidence of a hang), carrying what was suppressed before it
    /// if the stall had been decided; the stall's later reports are written too.
    mutating func hang(_ id: String) -> Decision {
        let before = decided[id]?.suppressedBefore ?? 0  // 0 for a suppressed one
        decided[id] = Decision(write: true, suppressedBefore: 0)
        return Decision(write: true, suppressedBefore: before)
    }

    /// The final report of stall `id`: the stall's decision, asked now if none was taken (and no report of it was
    /// published); the stall is then forgotten. Nil: write it.
    mutating func final(_ id: String, signature: String?, alreadyPublished: Bool, limit: Int,
                        now: UInt64) -> Decision? {
        if let decision = decided.removeValue(forKey: id) { return decision }
        guard !alreadyPublished, let signature else { return nil }
        return ask(signature, limit: limit, now: now)
    }

    /// Forgets stall `id`, whose final report will never come (the writer's queue refused it).
    mutating func forget(_ id: String) {
        decided[id] = nil
    }

    /// How many stalls were decided and their final has not come.
    var pendingCount: Int { decided.count }

    private mutating func ask(_ signature: String, limit: Int, now: UInt64) -> Decision {
        var limiter = limiters[limit] ?? SignatureRateLimiter(limit: limit, window: Self.window)
        defer { limiters[limit] = limiter }
        let (write, before) = limiter.admit(signature, now: now)
        return Decision(write: write, suppressedBefore: before)
    }
}
