// Needs the `Upload` trait (on by default): the HTTP client, SwiftNIO and compress-nio come with it.
#if Upload
import CStallmonLoopShims
import Foundation
import Logging
import Metrics
import Stallmon
import StallmonProfiles
import StallmonReport
import Synchronization

/// Counters of one uploader.
package struct UploadStatistics: Sendable, Equatable {
    /// Reports acknowledged by the receiver (2xx).
    package var delivered: Int
    /// Reports moved to `rejected/` (non-retryable answer, unreadable, or larger than a body).
    package var rejected: Int
    /// Reports dropped by the spool quotas.
    package var dropped: Int
    /// Requests sent, and those that failed in a retryable way.
    package var requests: Int
    package var retryableFailures: Int
    /// Log records the receiver refused inside a 2xx (OTLP partialSuccess).
    package var partiallyRejectedRecords: Int
    /// Reports still pending (not counting those delivered but not yet removed).
    package var pending: Int
    /// Reports the receiver acknowledged that could not be removed from the spool (a read-only or failing spool):
    /// never sent again by this uploader; their removal is retried with backoff.
    package var deliveredNotRemoved: Int
    /// Reports whose profiles the receiver refused for good while their logs went through (`upload_signals` with
    /// both): the profiles were dropped.
    package var profilesRefused: Int = 0
}

/// Delivers the spool to a collector: batches, gzip, OTLP retry rules, quotas. Runs on its own plain thread
/// (never the loop thread); `flush(deadline:)` does the same work synchronously for `stallmon upload --once`.
///
/// At-least-once: an entry leaves `pending/` only after a 2xx. A crash between the receiver's acknowledgement and
/// the unlink resends the same reports with the same ids, which the receiver can dedupe on.
package final class Uploader: Sendable {
    package let configuration: UploadConfiguration
    package let spool: Spool
    /// The endpoint as logs may show it: without user, password or query.
    private let endpointForLogs: String
    private let url: String
    private let profilesURL: String
    private let requestHeaders: [(String, String)]
    private let logger: Logger
    private let transport: HTTPTransport
    private let wakeSignal = WakeSignal()
    private let stopping = Atomic<Bool>(false)
    private let flushOnStop = Atomic<Bool>(true)
    private let stopDeadline = Atomic<UInt64>(0)
    private let thread = Mutex<PosixThread?>(nil)
    private let finished = DispatchSemaphore(value: 0)
    private let counters = Counters()
    private let deliveredCounter: Counter
    private let droppedCounter: Counter

    private final class Counters: Sendable {
        let delivered = Atomic<Int>(0)
        let rejected = Atomic<Int>(0)
        let dropped = Atomic<Int>(0)
        let requests = Atomic<Int>(0)
        let retryable = Atomic<Int>(0)
        let partial = Atomic<Int>(0)
        let deliveredNotRemoved = Atomic<Int>(0)
        let profilesRefused = Atomic<Int>(0)
    }

    /// Entries acknowledged by the receiver whose removal failed, by name and file: filtered out of every batch so
    /// a spool that cannot be written is not resent at full speed. Uploader-thread only (or `flush`'s caller).
    private let acknowledged = Mutex<[String: FileIdentity?]>([:])
    /// Entries refused for good (by the receiver, or unreadable, or too large) that could not be moved to
    /// `rejected/` (a full, read-only or broken spool): by name, file and reason. Filtered out of every batch, so a
    /// refused batch is never re-sent back to back; the move is retried with backoff.
    private let refused = Mutex<[String: (identity: FileIdentity?, reason: String)]>([:])

    /// Validates `configuration` (an endpoint is required here) and resolves the token. Throws before any work.
    package init(spool: Spool, configuration: UploadConfiguration, logger: Logger) throws(ConfigurationError) {
        try configuration.validate()
        guard let endpoint = configuration.endpoint else {
            throw ConfigurationError("no upload_endpoint configured")
        }
        var headers = configuration.headers.map { ($0.name, $0.value) }
        if let token = try configuration.resolvedToken() { headers.append(("Authorization", "Bearer \(token)")) }
        self.configuration = configuration
        self.spool = spool
        endpointForLogs = UploadConfiguration.redacted(endpoint: endpoint)
        url = configuration.format.url(for: endpoint)
        profilesURL = UploadSignal.profilesURL(for: endpoint)
        requestHeaders = headers
        self.logger = logger
        transport = HTTPTransport(connectTimeout: min(configuration.requestTimeout, .seconds(5)))
        deliveredCounter = Counter(label: "stallmon_upload_delivered_total")
        droppedCounter = Counter(label: "stallmon_upload_dropped_total")
    }

    deinit {
        transport.shutdown()
    }

    package var statistics: UploadStatistics {
        UploadStatistics(delivered: counters.delivered.load(ordering: .relaxed),
                         rejected: counters.rejected.load(ordering: .relaxed),
                         dropped: counters.dropped.load(ordering: .relaxed),
                         requests: counters.requests.load(ordering: .relaxed),
                         retryableFailures: counters.retryable.load(ordering: .relaxed),
                         partiallyRejectedRecords: counters.partial.load(ordering: .relaxed),
                         pending: notYetDelivered((try? spool.pending()) ?? []).count,
                         deliveredNotRemoved: counters.deliveredNotRemoved.load(ordering: .relaxed),
                         profilesRefused: counters.profilesRefused.load(ordering: .relaxed))
    }

    /// `entries` less those already acknowledged (same name, same file).
    private func notYetDelivered(_ entries: [SpoolEntry]) -> [SpoolEntry] {
        let sendable = acknowledged.withLock { acknowledged in
            acknowledged.isEmpty ? entries : entries.filter { entry in
                guard let identity = acknowledged[entry.name] else { return true }
                return !FileIdentity.same(identity, entry.identity)
            }
        }
        return refused.withLock { refused in
            refused.isEmpty ? sendable : sendable.filter { entry in
                guard let known = refused[entry.name] else { return true }
                return !FileIdentity.same(known.identity, entry.identity)
            }
        }
    }

    // MARK: - Background mode

    /// Starts the upload thread.
    package func start() {
        let started = PosixThread.start(name: "stallmon-upload") { [self] in
            var state = LoopState()
            run(state: &state, until: nil, flushAll: false)
            finished.signal()
        }
        if started == nil { logger.error("stallmon: cannot start the upload thread; reports stay in the spool") }
        thread.withLock { $0 = started }
    }

    /// How long `stop` waits for the upload thread once its deadline passed and the request in flight was cancelled.
    static let joinAfterCancel: Duration = .seconds(1)

    /// A report was spooled: look at the spool now rather than at the next poll.
    package func notify() {
        wakeSignal.wake()
    }

    /// Graceful shutdown: sends what is pending (ignoring batch age) until done, a retryable failure, or `deadline`;
    /// then abandons the request in flight and returns. Nothing pending is deleted without an acknowledgement.
    package func stop(deadline: Duration = .seconds(5)) {
        stopDeadline.store(cstallmon_monotonic_ns() + UInt64(max(0, deadline.nanosecondsClamped)), ordering: .relaxed)
        stopping.store(true, ordering: .releasing)
        notify()
        let running = thread.withLock { thread in
            defer { thread = nil }
            return thread
        }
        guard let running else { return }
        if finished.wait(timeout: .now() + .nanoseconds(Int(max(0, deadline.nanosecondsClamped)))) == .timedOut {
            transport.cancelInFlight()
        }
        // The cancelled request ends within moments; a thread blocked elsewhere (a hung file system under the spool)
        // is left to end on its own: stop() stays bounded.
        if !running.join(timeout: Self.joinAfterCancel) {
            logger.error("""
                stallmon: the upload thread did not stop in time and was left running; the spool keeps what it has \
                not sent
                """)
        }
    }

    // MARK: - Once mode

    /// Sends everything pending now, retrying retryable failures until `deadline`. Returns the statistics after.
    package func flush(deadline: Duration) -> UploadStatistics {
        var state = LoopState()
        run(state: &state, until: cstallmon_monotonic_ns() + UInt64(max(0, deadline.nanosecondsClamped)),
            flushAll: true)
        return statistics
    }

    // MARK: - The loop

    private struct LoopState {
        var attempt = 0
        var retryAt: UInt64 = 0  // monotonic
        var failing: String?
        var random = SystemRandomNumberGenerator()
        /// Removal of acknowledged entries.
        var removal = SpoolChore()
        /// Moving refused entries to `rejected/`.
        var rejection = SpoolChore()
        /// `rejected/` was brought within its bounds once since this uploader started (a config may have lowered them).
        var rejectedTrimmed = false
        /// Entries whose profiles the receiver acknowledged (or refused for good) while their logs are not yet: by
        /// name and file (an interim report replaced by its final one under the same name is a new entry). Only
        /// the entries of the batch being sent are kept. In memory only: a restart may send a batch's profiles twice.
        var profilesAcknowledged: [String: FileIdentity?] = [:]

        func profilesAcknowledged(_ entry: SpoolEntry) -> Bool {
            guard let known = profilesAcknowledged[entry.name] else { return false }
            return FileIdentity.same(known, entry.identity)
        }

        mutating func acknowledgeProfiles(of entries: [SpoolEntry]) {
            for entry in entries { profilesAcknowledged[entry.name] = entry.identity }
        }
    }

    /// A spool operation that failed and is retried: next try (monotonic), tries so far, the error being reported.
    private struct SpoolChore {
        var retryAt: UInt64 = 0
        var attempt = 0
        var failing: String?

        /// The next try, after the same exponential backoff as a failed request (full value, no jitter).
        mutating func failed(_ error: String, configuration: UploadConfiguration) {
            failing = error
            attempt += 1
            retryAt = cstallmon_monotonic_ns() + RetryPolicy.backoff(
                attempt: attempt, base: UInt64(configuration.backoffBase.nanosecondsClamped),
                max: UInt64(configuration.backoffMax.nanosecondsClamped), jitter: 1)
        }

        mutating func succeeded() {
            failing = nil
            attempt = 0
        }
    }

    /// Works until stopped (background), or until the spool is empty or `until` passes (once mode).
    private func run(state: inout LoopState, until: UInt64?, flushAll: Bool) {
        let plan = BatchPlan(maxReports: configuration.batchMaxReports,
                             maxAgeNanoseconds: UInt64(configuration.batchMaxAge.nanosecondsClamped),
                             maxBodyBytes: configuration.maxBodyBytes)
        while true {
            let monotonicNow = cstallmon_monotonic_ns()
            let isStopping = stopping.load(ordering: .acquiring)
            let deadline = until ?? (isStopping ? stopDeadline.load(ordering: .relaxed) : nil)
            if let deadline, monotonicNow >= deadline { return }
            let flushing = flushAll || (isStopping && flushOnStop.load(ordering: .relaxed))
            if isStopping && !flushing { return }

            if state.retryAt > monotonicNow {
                if flushing && until == nil { return }  // shutting down: no waiting out a backoff
                wait(until: min(state.retryAt, deadline ?? .max))
                continue
            }
            // One uploader at a time per spool, across processes (an in-process one and a sidecar): everything from
            // listing to removing happens under the lock, so no two send the same entries, and no listing sweeps
            // what another is moving. Another uploader's pass is waited for, not joined.
            guard let lock = spool.tryLockForSending() else {
                wait(until: monotonicNow + 50_000_000)
                continue
            }
            let next = pass(&state, plan: plan, now: monotonicNow, deadline: deadline, flushing: flushing)
            withExtendedLifetime(lock) {}
            switch next {
            case .finished: return
            case .again: continue
            case .waitUntil(let wakeAt): wait(until: wakeAt)
            }
        }
    }

    /// What the loop does after a pass.
    private enum PassOutcome {
        case finished
        case again
        case waitUntil(UInt64)
    }

    /// One pass under the sending lock: chores, quotas, then the batch plan's decision, carried out.
    private func pass(_ state: inout LoopState, plan: BatchPlan, now monotonicNow: UInt64, deadline: UInt64?,
                      flushing: Bool) -> PassOutcome {
        let idlePoll: UInt64 = 1_000_000_000
        if state.removal.failing != nil && state.removal.retryAt <= monotonicNow { retryRemovals(&state) }
        if state.rejection.retryAt <= monotonicNow && !refused.withLock({ $0.isEmpty }) { retryRejects(&state) }
        if !state.rejectedTrimmed {
            state.rejectedTrimmed = true
            trimRejected()
        }
        let pending: [SpoolEntry]
        do {
            pending = notYetDelivered(try enforceQuotas(try spool.pending()))
        } catch {
            logFailure(&state, "cannot read the spool: \(error)")
            state.retryAt = monotonicNow + idlePoll
            return .again
        }
        switch plan.decide(pending, now: WallClock.nowNanoseconds(), flush: flushing) {
        case .idle:
            return flushing ? .finished : .waitUntil(monotonicNow + idlePoll)
        case .wait(let dueAt):
            let wallNow = WallClock.nowNanoseconds()
            return .waitUntil(monotonicNow + min(idlePoll, dueAt > wallNow ? dueAt - wallNow : 0))
        case .tooLarge(let entry):
            rejectEntries(spool.pinned([entry]), state: &state,
                          reason: "report of \(entry.bytes) bytes exceeds upload_max_body_bytes "
                              + "(\(configuration.maxBodyBytes))")
            return .again
        case .send(let batch):
            deliver(spool.pinned(batch), state: &state, deadline: deadline)
            sendMore(after: batch, of: pending, state: &state, plan: plan, deadline: deadline, flushing: flushing)
            return .again
        }
    }

    /// The batches after the first one of a listing, sent from the same listing while they go through: listing
    /// 10,000 entries for each batch of 100 was a third of the time of an upload after an outage. Of each batch only
    /// the entries still the very files listed are read and sent (`pinnedIfUnchanged`); one removed or replaced
    /// meanwhile waits for the next listing. A backoff, a stop, the deadline or any decision other than "send" ends
    /// it; the next pass lists the spool again.
    private func sendMore(after first: [SpoolEntry], of listing: [SpoolEntry], state: inout LoopState,
                          plan: BatchPlan, deadline: UInt64?, flushing: Bool) {
        var sent = Set(first.map(\.name))
        while true {
            let now = cstallmon_monotonic_ns()
            guard state.retryAt <= now, deadline.map({ now < $0 }) ?? true,
                  flushing || !stopping.load(ordering: .acquiring) else { return }
            // Delivered, refused or unremovable entries of the batches before are left out as in a new listing.
            let remaining = notYetDelivered(listing.filter { !sent.contains($0.name) })
            guard case .send(let batch) = plan.decide(remaining, now: WallClock.nowNanoseconds(), flush: flushing)
            else { return }
            let unchanged = spool.pinnedIfUnchanged(batch)
            if !unchanged.isEmpty { deliver(unchanged, state: &state, deadline: deadline) }
            sent.formUnion(batch.map(\.name))
        }
    }

    private func deliver(_ batch: [SpoolEntry], state: inout LoopState, deadline: UInt64?) {
        var reports: [StallReport] = []
        var sendable: [SpoolEntry] = []
        // Decoding is most of a batch's CPU time; it runs on all cores (Dispatch's pool, a burst per batch).
        for (entry, outcome) in zip(batch, ReportReader.readAll(batch.map { spool.path(of: $0) }, followingLinks: false)) {
            switch outcome {
            case .success(let report):
                reports.append(report)
                sendable.append(entry)
            case .failure(let error):
                rejectEntries([entry], state: &state, reason: "unreadable: \(error.reason)")
            }
        }
        guard !reports.isEmpty else { return }
        if configuration.signals.contains(.profiles) {
            guard sendProfiles(reports, of: sendable, state: &state, deadline: deadline) else { return }
        }
        guard configuration.signals.contains(.logs) else {
            acknowledge(sendable, rejectedRecords: 0, message: nil, state: &state)
            return
        }
        let body: [UInt8]
        do {
            body = try UploadPayload.encode(reports, format: configuration.format,
                                            serviceName: configuration.serviceName,
                                            observedAt: WallClock.nowNanoseconds())
        } catch {
            rejectEntries(sendable, state: &state, reason: "cannot encode: \(error)")
            return
        }
        counters.requests.wrappingAdd(1, ordering: .relaxed)
        let outcome = transport.post(url: url, body: body, contentType: configuration.format.contentType,
                                     headers: requestHeaders, timeout: requestTimeout(deadline: deadline))
        switch decide(outcome, state: &state) {
        case .delivered(let rejectedRecords, let message):
            acknowledge(sendable, rejectedRecords: rejectedRecords, message: message, state: &state)
        case .retry(let after, let reason):
            retry(after: after, reason: reason, state: &state)
        case .reject(let reason):
            rejectEntries(sendable, state: &state, reason: reason)
            state.attempt = 0
        }
    }

    /// Sends the OTLP profiles of the batch's reports not yet acknowledged as profiles (a batch whose logs failed
    /// after its profiles went through is retried without sending them twice). True when the logs may follow;
    /// false when the batch waits for a retry, or, sent as profiles only, was refused.
    private func sendProfiles(_ reports: [StallReport], of entries: [SpoolEntry], state: inout LoopState,
                              deadline: UInt64?) -> Bool {
        // What is remembered is for this batch, retried: entries that left the spool meanwhile (quotas, another
        // uploader) are forgotten here, so the record never outgrows a batch.
        let names = Set(entries.map(\.name))
        state.profilesAcknowledged = state.profilesAcknowledged.filter { names.contains($0.key) }
        let unsent = entries.indices.filter { !state.profilesAcknowledged(entries[$0]) }
        guard !unsent.isEmpty else { return true }
        let unsentEntries = unsent.map { entries[$0] }
        // An interim report (ongoing, no hang) is replaced by its final one, which is sent too: profiles count only
        // finals and hangs, or a profile store would count the stall twice (logs carry the id to dedupe on).
        let profiled = unsent.filter { reports[$0].ongoing == false || reports[$0].hang != nil }
        guard !profiled.isEmpty else {
            state.acknowledgeProfiles(of: unsentEntries)
            return true
        }
        let body: [UInt8]
        do {
            body = try StallOTLPProfiles.request(profiled.map { reports[$0] }, serviceName: configuration.serviceName)
                .serializedBytes()
        } catch {
            return refuseProfiles(of: entries, unsent: unsentEntries, reason: "cannot encode profiles: \(error)",
                                  state: &state)
        }
        counters.requests.wrappingAdd(1, ordering: .relaxed)
        let outcome = transport.post(url: profilesURL, body: body, contentType: "application/x-protobuf",
                                     headers: requestHeaders, timeout: requestTimeout(deadline: deadline))
        switch decide(outcome, state: &state) {
        case .delivered:
            if case .response(_, _, _, let bytes) = outcome, !bytes.isEmpty,
               let answer = try? StallOTLPProfiles.Response(serializedBytes: bytes),
               answer.partialSuccess.rejectedProfiles > 0 || !answer.partialSuccess.errorMessage.isEmpty {
                counters.partial.wrappingAdd(Int(clamping: answer.partialSuccess.rejectedProfiles), ordering: .relaxed)
                logger.warning("stallmon: the receiver accepted the batch's profiles but rejected some", metadata: [
                    "rejected": "\(answer.partialSuccess.rejectedProfiles)",
                    "message": "\(answer.partialSuccess.errorMessage)",
                ])
            }
            state.acknowledgeProfiles(of: unsentEntries)
            return true
        case .retry(let after, let reason):
            retry(after: after, reason: "profiles: \(reason)", state: &state)
            return false
        case .reject(let reason):
            return refuseProfiles(of: entries, unsent: unsentEntries, reason: "profiles: \(reason)", state: &state)
        }
    }

    /// The receiver refused the batch's profiles for good. With logs also sent, the logs still go (a profile is
    /// derived from the report the logs carry whole) and the profiles are not retried; sent as profiles only, the
    /// batch moves to `rejected/`.
    private func refuseProfiles(of entries: [SpoolEntry], unsent: [SpoolEntry], reason: String,
                                state: inout LoopState) -> Bool {
        state.attempt = 0
        guard configuration.signals.contains(.logs) else {
            rejectEntries(entries, state: &state, reason: reason)
            return false
        }
        counters.profilesRefused.wrappingAdd(unsent.count, ordering: .relaxed)
        logger.error("stallmon: the receiver refused the batch's profiles; its logs are sent, the profiles dropped",
                     metadata: ["count": "\(unsent.count)", "reason": "\(reason)"])
        state.acknowledgeProfiles(of: unsent)
        return true
    }

    private func requestTimeout(deadline: UInt64?) -> Duration {
        var timeout = configuration.requestTimeout
        if let deadline {
            let left = deadline > cstallmon_monotonic_ns() ? deadline - cstallmon_monotonic_ns() : 0
            timeout = min(timeout, .nanoseconds(Int64(clamping: max(left, 1_000_000))))
        }
        return timeout
    }

    private func decide(_ outcome: DeliveryOutcome, state: inout LoopState) -> RetryPolicy.Decision {
        RetryPolicy.decide(
            outcome, attempt: state.attempt + 1,
            baseBackoff: UInt64(configuration.backoffBase.nanosecondsClamped),
            maxBackoff: UInt64(configuration.backoffMax.nanosecondsClamped),
            retryAfterCap: UInt64(configuration.retryAfterCap.nanosecondsClamped),
            jitter: Double.random(in: 0..<1, using: &state.random),
            nowEpochSeconds: Int(WallClock.nowNanoseconds() / 1_000_000_000))
    }

    private func retry(after: UInt64, reason: String, state: inout LoopState) {
        counters.retryable.wrappingAdd(1, ordering: .relaxed)
        state.attempt += 1
        state.retryAt = cstallmon_monotonic_ns() + after
        logFailure(&state, reason)
    }

    /// Every signal acknowledged `entries`: they leave the spool.
    private func acknowledge(_ entries: [SpoolEntry], rejectedRecords: Int, message: String?, state: inout LoopState) {
        do {
            try spool.remove(entries)
        } catch {
            rememberUnremoved(entries, error: "\(error)", state: &state)
        }
        for entry in entries { state.profilesAcknowledged[entry.name] = nil }
        counters.delivered.wrappingAdd(entries.count, ordering: .relaxed)
        deliveredCounter.increment(by: Int64(entries.count))
        if rejectedRecords > 0 {
            counters.partial.wrappingAdd(rejectedRecords, ordering: .relaxed)
            logger.warning("stallmon: the receiver accepted the batch but rejected some records", metadata: [
                "rejected": "\(rejectedRecords)", "message": "\(message ?? "")",
            ])
        }
        state.attempt = 0
        if let previous = state.failing {
            logger.notice("stallmon: uploads succeed again", metadata: ["endpoint": "\(endpointForLogs)",
                                                                        "previousError": "\(previous)"])
            state.failing = nil
        }
    }

    /// Delivered entries that could not be removed are remembered, not resent; their removal is retried with
    /// backoff. Logged when this starts and when it ends, not per try.
    private func rememberUnremoved(_ entries: [SpoolEntry], error: String, state: inout LoopState) {
        let count = acknowledged.withLock { acknowledged in
            for entry in entries { acknowledged[entry.name] = entry.identity }
            return acknowledged.count
        }
        counters.deliveredNotRemoved.store(count, ordering: .relaxed)
        if state.removal.failing == nil {
            logger.error("""
                stallmon: delivered reports cannot be removed from the spool; they are not sent again, and their \
                removal is retried
                """, metadata: ["spool": "\(spool.pendingDirectory)", "error": "\(error)"])
        }
        state.removal.failed(error, configuration: configuration)
    }

    /// Retries removing what was delivered; forgets entries that are gone.
    private func retryRemovals(_ state: inout LoopState) {
        let remembered = acknowledged.withLock { $0 }
        let listed = (try? spool.pending()) ?? []
        let stillThere = listed.filter { entry in
            remembered[entry.name].map { FileIdentity.same($0, entry.identity) } ?? false
        }
        do {
            try spool.remove(stillThere)
        } catch {
            state.removal.failed("\(error)", configuration: configuration)
            return
        }
        acknowledged.withLock { $0.removeAll() }
        counters.deliveredNotRemoved.store(0, ordering: .relaxed)
        logger.notice("stallmon: delivered reports are removed from the spool again", metadata: [
            "spool": "\(spool.pendingDirectory)", "removed": "\(stillThere.count)",
            "previousError": "\(state.removal.failing ?? "")",
        ])
        state.removal.succeeded()
    }

    /// Logs an upload problem when uploads go from working to failing, not once per try (the reason may change
    /// from try to try, e.g. 503 then a reset; the recovery notice names the last one).
    private func logFailure(_ state: inout LoopState, _ reason: String) {
        let wasFailing = state.failing != nil
        state.failing = reason
        guard !wasFailing else { return }
        logger.warning("stallmon: upload failed; reports stay in the spool and will be retried", metadata: [
            "endpoint": "\(endpointForLogs)", "error": "\(reason)",
        ])
    }

    private func rejectEntries(_ entries: [SpoolEntry], state: inout LoopState, reason: String) {
        do {
            try spool.reject(entries, reason: reason)
            counters.rejected.wrappingAdd(entries.count, ordering: .relaxed)
            logger.error("stallmon: the receiver refused reports; moved to the spool's rejected/ directory",
                         metadata: ["count": "\(entries.count)", "reason": "\(reason)",
                                    "directory": "\(spool.rejectedDirectory)"])
            trimRejected()
        } catch {
            // Not sent again, never spun on: remembered, and the move retried with backoff. Logged when this starts.
            refused.withLock { refused in
                for entry in entries { refused[entry.name] = (entry.identity, reason) }
            }
            if state.rejection.failing == nil {
                logger.error("""
                    stallmon: refused reports cannot be moved to rejected/; they are not sent again, and the move \
                    is retried
                    """, metadata: ["count": "\(entries.count)", "reason": "\(reason)", "error": "\(error)",
                                    "directory": "\(spool.rejectedDirectory)"])
            }
            state.rejection.failed("\(error)", configuration: configuration)
        }
    }

    /// Retries moving refused entries to `rejected/`; forgets entries that are gone.
    private func retryRejects(_ state: inout LoopState) {
        let remembered = refused.withLock { $0 }
        let listed = (try? spool.pending()) ?? []
        let stillThere = listed.filter { entry in
            remembered[entry.name].map { FileIdentity.same($0.identity, entry.identity) } ?? false
        }
        do {
            for entry in stillThere {
                try spool.reject([entry], reason: remembered[entry.name]?.reason ?? "refused")
            }
        } catch {
            state.rejection.failed("\(error)", configuration: configuration)
            return
        }
        refused.withLock { $0.removeAll() }
        counters.rejected.wrappingAdd(stillThere.count, ordering: .relaxed)
        trimRejected()
        logger.notice("stallmon: refused reports are moved to rejected/ again", metadata: [
            "directory": "\(spool.rejectedDirectory)", "moved": "\(stillThere.count)",
            "previousError": "\(state.rejection.failing ?? "")",
        ])
        state.rejection.succeeded()
    }

    /// Keeps `rejected/` within its bounds (`rejected_max_*`); says what it removed. A failure is logged, not retried
    /// at once: the next rejection, or the next uploader's start, trims again.
    private func trimRejected() {
        let limits = SpoolLimits(maxReports: configuration.rejectedMaxReports, maxBytes: configuration.rejectedMaxBytes,
                                 maxAgeNanoseconds: UInt64(configuration.rejectedMaxAge.nanosecondsClamped))
        do {
            let removed = try spool.trimRejected(limits: limits, now: WallClock.nowNanoseconds())
            guard !removed.isEmpty else { return }
            logger.notice("stallmon: rejected/ over its bounds; removed the oldest refused reports", metadata: [
                "removed": "\(removed.count)", "oldest": "\(removed[0])", "directory": "\(spool.rejectedDirectory)",
                "limits": "\(limits.maxReports) reports, \(limits.maxBytes) bytes",
            ])
        } catch {
            logger.warning("stallmon: cannot trim rejected/", metadata: ["error": "\(error)"])
        }
    }

    /// Drops the oldest entries beyond the quotas; logs once per batch of drops.
    private func enforceQuotas(_ pending: [SpoolEntry]) throws -> [SpoolEntry] {
        let limits = SpoolLimits(maxReports: configuration.spoolMaxReports, maxBytes: configuration.spoolMaxBytes,
                                 maxAgeNanoseconds: UInt64(configuration.spoolMaxAge.nanosecondsClamped))
        let drop = SpoolQuota.entriesToDrop(pending, limits: limits, now: WallClock.nowNanoseconds())
        guard !drop.isEmpty else { return pending }
        try spool.remove(drop)
        counters.dropped.wrappingAdd(drop.count, ordering: .relaxed)
        droppedCounter.increment(by: Int64(drop.count))
        logger.warning("stallmon: spool over quota; dropped the oldest reports", metadata: [
            "dropped": "\(drop.count)", "oldest": "\(drop.first!.name)",
            "limits": "\(limits.maxReports) reports, \(limits.maxBytes) bytes",
        ])
        // Not always a prefix: a too-old entry goes wherever it stands.
        let dropped = Set(drop.map(\.name))
        return pending.filter { !dropped.contains($0.name) }
    }

    private func wait(until deadline: UInt64) {
        wakeSignal.wait(until: deadline)
    }
}
#endif  // Upload
