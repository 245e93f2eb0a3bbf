import CStallmonLoopShims
import Foundation
import Logging
import Metrics
import StallmonLoop
import StallmonReport
import Synchronization

/// The writer thread of one `ReportPipeline`: symbolicates, writes reports atomically, appends to the event logs,
/// hands reports to sinks. Watchdogs hand it messages through a bounded queue and never wait for it; when the queue
/// is full the report is dropped and counted rather than delaying detection.
final class ReportWriter: Sendable {
    enum Message: Sendable {
        case begin(StallEvidence)
        case interim(StallEvidence)
        case finish(StallEvidence)
        /// A stall past a hang limit, about to be acted on (`action`: `abort`, `watchdog`): written whatever the rate
        /// limit says, with a `stall.hang` event line; the final report (if the stall ever ends) replaces it.
        case hang(StallEvidence, action: String, afterMs: Double)
        /// A snapshot on demand (`SnapshotCoordinator`'s parts): written as `snapshot-….json` (`kind: snapshot`),
        /// never handed to sinks; `reply` gets its path or why it was not written.
        case snapshot([SnapshotCoordinator.Part], missing: Int, reply: SnapshotReply)
        /// The whole process did not run for this long (SIGSTOP, debugger, VM pause): logged, never a stall.
        case frozen(loopName: String, nanoseconds: UInt64)
        /// A loop's every-iteration figures over a window: a `loop.stats` line.
        case loopStats(LoopStatsReporter.Line, threadID: Int32)
        /// Swift Concurrency's every-job figures of one pool class over a window: a `pool.stats` line.
        case poolStats(PoolStatsReporter.Window)
    }

    let directory: String
    private let queue = WriterQueue()
    /// Why this thread's wake-up signal could not be created (the monitor then refuses to start).
    var setupError: FileError? { queue.setupError }
    private let thread = Mutex<PosixThread?>(nil)
    /// Symbolicators this writer created: one per distinct set of in-app rules among its monitors.
    let symbolicatorsCreated = Atomic<Int>(0)
    /// What the writer keeps for stalls until their final reports (paths and rate-limit decisions), after its latest
    /// batch (tests read it).
    let entriesKeptForStalls = Atomic<Int>(0)

    init(directory: String) {
        self.directory = directory
    }

    /// Starts the writer thread, which first sweeps abandoned temporary files and applies `firstClient`'s retention
    /// limits to what earlier runs left, so a service that never stalls still keeps its directory within them.
    func start(firstClient: PipelineMember) {
        let started = PosixThread.start(name: "stallmon-writer") { [self] in run(firstClient: firstClient) }
        if started == nil {
            firstClient.logger.error("stallmon: cannot start the report writer thread; reports will be dropped")
        }
        thread.withLock { $0 = started }
    }

    /// Finishes what is queued, then joins the thread.
    /// Stops the writer thread once its queue is written, waiting at most `timeout`: false when it is still blocked
    /// (in `flock` on an event log another process holds, a hung `fsync`, a sink), and then left to finish on its own.
    @discardableResult
    func stop(timeout: Duration) -> Bool {
        queue.stop()
        let running = thread.withLock { thread in
            defer { thread = nil }
            return thread
        }
        return running?.join(timeout: timeout) ?? true
    }

    /// Returns once every message accepted before the call has been handled, the writer thread is gone, or `timeout`
    /// passed: how many of those messages were not handled yet (0: all written).
    @discardableResult
    func flush(timeout: Duration) -> UInt64 {
        guard thread.withLock({ $0 != nil }) else { return 0 }
        return queue.waitUntilHandled(timeout: timeout) { self.thread.withLock { $0 != nil } }
    }

    /// Queues a message from `client`'s watchdog; never blocks. Returns false (and counts a drop) when the queue is
    /// full.
    @discardableResult
    func submit(_ message: Message, from client: PipelineMember) -> Bool {
        submitTracked(message, from: client) != nil
    }

    /// Queues a message as `submit` does, and returns its place in the queue's order (nil when refused), for
    /// `hasHandled`: a watchdog that must act once a report is durable asks at its later passes instead of waiting.
    @discardableResult
    func submitTracked(_ message: Message, from client: PipelineMember) -> UInt64? {
        let ticket = queue.submit(message, from: client)
        if ticket == nil, case .finish = message {
            client.counters.reportsDropped.wrappingAdd(1, ordering: .relaxed)
            client.dropped.increment()
        }
        return ticket
    }

    /// Whether the message `submitTracked` placed at `ticket` has been handled (its report and line written and,
    /// for a hang, made durable), or no writer thread runs to handle it. Never blocks.
    func hasHandled(_ ticket: UInt64) -> Bool {
        queue.hasHandled(ticket) || thread.withLock { $0 == nil }
    }

    // MARK: - Writer thread

    private func run(firstClient: PipelineMember) {
        var state = WriterState(files: ReportFiles(directory: directory))
        // Temporary files of writes a killed process never finished are not reports.
        AtomicFile.removeAbandonedTemporaryFiles(in: directory)
        state.files.applyRetention(for: firstClient)
        while true {
            // Reports a sink refused are offered again every second while there are any.
            let (batch, abandoned, stopping) = queue.take(
                waitingUntil: state.delivery.isEmpty ? nil : cstallmon_monotonic_ns() + 1_000_000_000)
            for (message, client) in batch { handle(message, client: client, state: &state) }
            for id in abandoned { state.forget(stall: id) }
            entriesKeptForStalls.store(state.files.paths.count + state.admission.pendingCount, ordering: .relaxed)
            if !state.delivery.isEmpty { state.delivery.offerRefusedAgain() }
            queue.handled(batch.count)
            if stopping && queue.isEmpty {
                if !state.delivery.isEmpty { state.delivery.offerRefusedAgain() }  // a last offer
                return
            }
        }
    }

    private func handle(_ message: Message, client: PipelineMember, state: inout WriterState) {
        switch message {
        case .begin(let snapshot): logBegin(snapshot, client: client, state: &state)
        case .interim(let snapshot): writeInterim(snapshot, client: client, state: &state)
        case .hang(let snapshot, let action, let afterMs):
            writeHang(snapshot, action: action, afterMs: afterMs, client: client, state: &state)
        case .snapshot(let parts, let missing, let reply):
            writeSnapshot(parts, missing: missing, reply: reply, client: client, state: &state)
        case .frozen(let loopName, let nanoseconds):
            log(EventLines.frozen(loopName, nanoseconds), client: client, state: &state)
        case .loopStats(let line, let threadID):
            log(EventLines.loopStats(line, threadID: threadID), client: client, state: &state)
        case .poolStats(let window): log(EventLines.poolStats(window), client: client, state: &state)
        case .finish(let snapshot): writeFinal(snapshot, client: client, state: &state)
        }
    }

    // MARK: - One method per message

    /// A stall began: a `stall.begin` line (its report comes with its interim or its end).
    private func logBegin(_ snapshot: StallEvidence, client: PipelineMember, state: inout WriterState) {
        let report = build(snapshot, client: client, state: &state)
        var event = EventLines.stall("begin", snapshot)
        event.elapsedMs = Double(snapshot.elapsedAtDetection) / 1e6
        event.topFrame = report.topFrame?.displayName
        log(event, client: client, state: &state)
    }

    /// A stall still going after `interim_after_ms`: its report so far, unless the rate limit suppresses the stall.
    private func writeInterim(_ snapshot: StallEvidence, client: PipelineMember, state: inout WriterState) {
        var report = build(snapshot, client: client, state: &state)
        let decision = state.admission.interim(
            snapshot.id, signature: report.signature, alreadyPublished: state.files.paths[snapshot.id] != nil,
            limit: client.configuration.reports.maxReportsPerSignaturePerHour, now: cstallmon_monotonic_ns())
        if let decision {
            guard decision.write else { return }  // its final is counted as suppressed
            if decision.suppressedBefore > 0 { report.suppressedBefore = decision.suppressedBefore }
        }
        if let path = write(report, client: client, state: &state) {
            client.counters.interimReportsWritten.wrappingAdd(1, ordering: .relaxed)
            log(EventLines.ongoing("interim", snapshot, report, path: path), client: client, state: &state)
        }
    }

    /// A stall past a hang limit: its report (always: the evidence of a hang; its final, if the stall ever ends,
    /// follows it) and a `stall.hang` line made durable, for the process may end right after it.
    private func writeHang(_ snapshot: StallEvidence, action: String, afterMs: Double, client: PipelineMember,
                           state: inout WriterState) {
        var report = build(snapshot, client: client, state: &state)
        report.hang = StallReport.Hang(action: action, afterMs: afterMs)
        let decision = state.admission.hang(snapshot.id)
        if decision.suppressedBefore > 0 { report.suppressedBefore = decision.suppressedBefore }
        Watchdog.process.hangs.noteTopFrame(id: snapshot.id, topFrame: report.topFrame?.displayName)
        let path = write(report, client: client, state: &state)
        if path != nil { client.counters.interimReportsWritten.wrappingAdd(1, ordering: .relaxed) }
        var event = EventLines.ongoing("hang", snapshot, report, path: path)
        event.action = action
        event.message = action == "abort"
            ? "hung past hang_abort_after_ms (\(Int(afterMs)) ms): the process ends with SIGABRT"
            : "hung past systemd_hang_after_ms (\(Int(afterMs)) ms): systemd's watchdog is no longer fed"
        log(event, client: client, state: &state, durable: true)
    }

    /// A snapshot on demand: its report (never offered to the sinks) and a `snapshot` line; the asker is answered.
    private func writeSnapshot(_ parts: [SnapshotCoordinator.Part], missing: Int, reply: SnapshotReply,
                               client: PipelineMember, state: inout WriterState) {
        let report = SnapshotReport.build(parts, missing: missing,
                                          builder: state.reportBuilder(for: client.configuration.analysis.inApp))
        guard let path = write(report, client: client, state: &state, toSinks: false) else {
            reply.finish(.failure("the report directory could not be written (see the service's log)"))
            return
        }
        var event = StallEvent(time: WallClock.iso8601(nanoseconds: WallClock.nowNanoseconds()), event: "snapshot")
        event.report = path
        event.count = report.snapshot?.entries.count
        event.message = missing > 0 ? "\(missing) watchdog(s) did not answer in time" : nil
        log(event, client: client, state: &state)
        SnapshotReport.keepNewest(in: directory, count: SnapshotReport.kept)
        reply.finish(.success(path))
    }

    /// A stall ended: its final report (unless the rate limit suppresses the stall; it is then counted) and a
    /// `stall.end` line either way.
    private func writeFinal(_ snapshot: StallEvidence, client: PipelineMember, state: inout WriterState) {
        let counters = client.counters
        var report = build(snapshot, client: client, state: &state)
        let decision = state.admission.final(
            snapshot.id, signature: report.signature, alreadyPublished: state.files.paths[snapshot.id] != nil,
            limit: client.configuration.reports.maxReportsPerSignaturePerHour, now: cstallmon_monotonic_ns())
        var path: String?
        if let decision, !decision.write {
            counters.reportsSuppressed.wrappingAdd(1, ordering: .relaxed)
        } else {
            if let before = decision?.suppressedBefore, before > 0 { report.suppressedBefore = before }
            path = write(report, client: client, state: &state)
            if path != nil {
                counters.reportsWritten.wrappingAdd(1, ordering: .relaxed)
                client.written.increment()
                state.files.applyRetention(for: client)
            } else {
                counters.reportsDropped.wrappingAdd(1, ordering: .relaxed)
                client.dropped.increment()
            }
        }
        var event = EventLines.stall("end", snapshot)
        event.durationMs = report.durationMs
        event.topFrame = report.topFrame?.displayName
        event.stallClass = report.stallClass
        event.signature = report.signature
        event.phase = report.phase
        if decision?.write == false {
            event.suppressed = true
        } else {
            event.samples = report.samples.count
            event.report = path
        }
        log(event, client: client, state: &state)
        state.files.paths[snapshot.id] = nil
    }

    private func build(_ snapshot: StallEvidence, client: PipelineMember, state: inout WriterState) -> StallReport {
        if state.builders[client.configuration.analysis.inApp] == nil { symbolicatorsCreated.wrappingAdd(1, ordering: .relaxed) }
        let builder = state.reportBuilder(for: client.configuration.analysis.inApp)
        var report = builder.build(snapshot)
        report.mode = snapshot.mode
        report.job = snapshot.job
        // A hung stall's every ongoing report says so (each replaces the one before on disk); its final has none.
        report.hang = snapshot.hang
        if let text = snapshot.taskLabel?.text { report.label = text }
        report.traceId = snapshot.taskLabel?.traceId
        report.spanId = snapshot.taskLabel?.spanId
        for section in snapshot.sections { section.write(into: &report, builder: builder) }
        return report
    }

    /// Writes `report` (`ReportFiles.write`); a failure's `monitor.error` line goes to the event log.
    private func write(_ report: StallReport, client: PipelineMember, state: inout WriterState,
                       toSinks: Bool = true) -> String? {
        var lines: [StallEvent] = []
        let path = state.files.write(report, client: client, delivery: &state.delivery, toSinks: toSinks) {
            lines.append($0)
        }
        for line in lines { log(line, client: client, state: &state) }
        return path
    }

    private func log(_ event: StallEvent, client: PipelineMember, state: inout WriterState, durable: Bool = false) {
        do {
            try state.eventLog(for: client.configuration).append(event, durable: durable)
        } catch {
            client.counters.eventsDropped.wrappingAdd(1, ordering: .relaxed)
        }
    }
}
