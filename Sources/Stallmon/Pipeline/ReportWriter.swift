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
        case begin(StallSnapshot)
        case interim(StallSnapshot)
        case finish(StallSnapshot)
        /// A stall past a hang limit, about to be acted on (`action`: `abort`, `watchdog`): written whatever the rate
        /// limit says, with a `stall.hang` event line; the final report (if the stall ever ends) replaces it.
        case hang(StallSnapshot, action: String, afterMs: Double)
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

    /// Room for a burst from many loops at once (16 loops × begin, interim and finish, with margin).
    static let queueLimit = 1024

    let directory: String
    private let queue = Mutex<Queue>(Queue())
    private let wakeSignal = WakeSignal()
    /// Signalled whenever the writer finished a batch, for `flush()`.
    private let progress = MonotonicCondition()
    /// Messages written so far (read under `progress`).
    nonisolated(unsafe) private var processed: UInt64 = 0
    /// The same count, for a watchdog that asks without waiting (`hasHandled`).
    private let handled = Atomic<UInt64>(0)
    /// Why this thread's wake-up signal could not be created (the monitor then refuses to start).
    var setupError: FileError? { wakeSignal.creationError }
    private let thread = Mutex<PosixThread?>(nil)
    /// Symbolicators this writer created: one per distinct set of in-app rules among its monitors.
    let symbolicatorsCreated = Atomic<Int>(0)
    /// What the writer keeps for stalls until their final reports (paths and rate-limit decisions), after its latest
    /// batch (tests read it).
    let entriesKeptForStalls = Atomic<Int>(0)

    private struct Queue {
        var messages: [(Message, ReportClient)] = []
        var stopping = false
        var accepted: UInt64 = 0
        /// Stalls whose `.finish` the full queue refused: the writer forgets what it kept for them (their rate-limit
        /// decision, their report's path), which only the finish would have cleared. Bounded like the queue.
        var abandoned: [String] = []
    }

    init(directory: String) {
        self.directory = directory
    }

    /// Starts the writer thread, which first sweeps abandoned temporary files and applies `firstClient`'s retention
    /// limits to what earlier runs left, so a service that never stalls still keeps its directory within them.
    func start(firstClient: ReportClient) {
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
        queue.withLock { $0.stopping = true }
        wakeSignal.wake()
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
        let target = queue.withLock { $0.accepted }
        guard thread.withLock({ $0 != nil }) else { return 0 }
        wakeSignal.wake()
        let deadline = cstallmon_monotonic_ns() &+ UInt64(clamping: max(0, timeout.nanosecondsClamped))
        progress.lock()
        defer { progress.unlock() }
        while processed < target {
            if !progress.wait(until: min(deadline, cstallmon_monotonic_ns() + 1_000_000_000)) {
                if thread.withLock({ $0 == nil }) { return 0 }
                if cstallmon_monotonic_ns() >= deadline { return target - processed }
            }
        }
        return 0
    }

    /// Queues a message from `client`'s watchdog; never blocks. Returns false (and counts a drop) when the queue is
    /// full.
    @discardableResult
    func submit(_ message: Message, from client: ReportClient) -> Bool {
        submitTracked(message, from: client) != nil
    }

    /// Queues a message as `submit` does, and returns its place in the queue's order (nil when refused), for
    /// `hasHandled`: a watchdog that must act once a report is durable asks at its later passes instead of waiting.
    @discardableResult
    func submitTracked(_ message: Message, from client: ReportClient) -> UInt64? {
        let ticket = queue.withLock { state -> UInt64? in
            guard state.messages.count < Self.queueLimit, !state.stopping else { return nil }
            state.messages.append((message, client))
            state.accepted += 1
            return state.accepted
        }
        if ticket != nil {
            wakeSignal.wake()
        } else if case .finish(let snapshot) = message {
            client.counters.reportsDropped.wrappingAdd(1, ordering: .relaxed)
            client.dropped.increment()
            queue.withLock { state in
                if state.abandoned.count < Self.queueLimit { state.abandoned.append(snapshot.id) }
            }
        }
        return ticket
    }

    /// Whether the message `submitTracked` placed at `ticket` has been handled (its report and line written and,
    /// for a hang, made durable), or no writer thread runs to handle it. Never blocks.
    func hasHandled(_ ticket: UInt64) -> Bool {
        handled.load(ordering: .acquiring) >= ticket || thread.withLock { $0 == nil }
    }

    // MARK: - Writer thread

    private func run(firstClient: ReportClient) {
        var state = WriterState()
        // Temporary files of writes a killed process never finished are not reports.
        AtomicFile.removeAbandonedTemporaryFiles(in: directory)
        applyRetention(for: firstClient)
        while true {
            // Reports a sink refused are offered again every second while there are any.
            wakeSignal.wait(until: state.refusedBySink.isEmpty ? nil : cstallmon_monotonic_ns() + 1_000_000_000)
            let (batch, abandoned, stopping) = queue.withLock { state in
                defer {
                    state.messages.removeAll(keepingCapacity: true)
                    state.abandoned.removeAll()
                }
                return (state.messages, state.abandoned, state.stopping)
            }
            for (message, client) in batch { handle(message, client: client, state: &state) }
            for id in abandoned { state.forget(stall: id) }
            entriesKeptForStalls.store(state.reportPaths.count + state.admission.pendingCount, ordering: .relaxed)
            if !state.refusedBySink.isEmpty { offerRefusedReportsAgain(&state) }
            progress.lock()
            processed += UInt64(batch.count)
            handled.store(processed, ordering: .releasing)
            progress.broadcast()
            progress.unlock()
            if stopping && queue.withLock({ $0.messages.isEmpty }) {
                if !state.refusedBySink.isEmpty { offerRefusedReportsAgain(&state) }  // a last offer
                return
            }
        }
    }

    /// Writer-thread-only state.
    private struct WriterState {
        /// One writer per event-log file.
        var eventLogs: [String: EventLog] = [:]
        /// One report builder (and symbolicator) per set of in-app rules; almost always exactly one.
        var builders: [InAppRules: ReportBuilder] = [:]
        var failing: String?
        var failingDescription = ""
        /// Per sink: the last failure logged, until it succeeds again.
        var sinkFailing: [String: String] = [:]
        var droppedSinceFailure = 0
        var reportPaths: [String: String] = [:]
        /// The rate limit, asked once per stall.
        var admission = StallAdmission()

        /// What was kept for stall `id` until its final report, which will not come (refused by a full queue).
        mutating func forget(stall id: String) {
            reportPaths[id] = nil
            admission.forget(id)
        }

        /// Published reports a sink refused (a spool it could not link into), by sink and path: handed to it again
        /// from the published file until it takes them (the latest report of a path only).
        var refusedBySink: [String: (report: StallReport, path: String, client: ReportClient, sink: Int)] = [:]

        mutating func reportBuilder(for rules: InAppRules) -> ReportBuilder {
            if let builder = builders[rules] { return builder }
            let made = ReportBuilder(symbolicator: Symbolicator(inAppRules: rules))
            builders[rules] = made
            return made
        }

        mutating func eventLog(for configuration: StallMonitorConfiguration) -> EventLog {
            let path = configuration.resolvedEventLogPath
            if let log = eventLogs[path] { return log }
            let made = EventLog(path: path, maxBytes: configuration.eventLogMaxBytes,
                                maxFiles: configuration.eventLogMaxFiles)
            eventLogs[path] = made
            return made
        }
    }

    private func handle(_ message: Message, client: ReportClient, state: inout WriterState) {
        switch message {
        case .begin(let snapshot): logBegin(snapshot, client: client, state: &state)
        case .interim(let snapshot): writeInterim(snapshot, client: client, state: &state)
        case .hang(let snapshot, let action, let afterMs):
            writeHang(snapshot, action: action, afterMs: afterMs, client: client, state: &state)
        case .snapshot(let parts, let missing, let reply):
            writeSnapshot(parts, missing: missing, reply: reply, client: client, state: &state)
        case .frozen(let loopName, let nanoseconds): logFreeze(loopName, nanoseconds, client: client, state: &state)
        case .loopStats(let line, let threadID): logLoopStats(line, threadID: threadID, client: client, state: &state)
        case .poolStats(let window): logPoolStats(window, client: client, state: &state)
        case .finish(let snapshot): writeFinal(snapshot, client: client, state: &state)
        }
    }

    // MARK: - One method per message

    /// A stall began: a `stall.begin` line (its report comes with its interim or its end).
    private func logBegin(_ snapshot: StallSnapshot, client: ReportClient, state: inout WriterState) {
        let report = build(snapshot, client: client, state: &state)
        var event = baseEvent("stall.begin", snapshot)
        event.elapsedMs = Double(snapshot.elapsedAtDetection) / 1e6
        event.topFrame = report.topFrame?.displayName
        log(event, client: client, state: &state)
    }

    /// A stall still going after `interim_after_ms`: its report so far, unless the rate limit suppresses the stall.
    private func writeInterim(_ snapshot: StallSnapshot, client: ReportClient, state: inout WriterState) {
        var report = build(snapshot, client: client, state: &state)
        let decision = state.admission.interim(
            snapshot.id, signature: report.signature, alreadyPublished: state.reportPaths[snapshot.id] != nil,
            limit: client.configuration.maxReportsPerSignaturePerHour, now: cstallmon_monotonic_ns())
        if let decision {
            guard decision.write else { return }  // its final is counted as suppressed
            if decision.suppressedBefore > 0 { report.suppressedBefore = decision.suppressedBefore }
        }
        if let path = persist(report, client: client, state: &state) {
            client.counters.interimReportsWritten.wrappingAdd(1, ordering: .relaxed)
            log(ongoingEvent("stall.interim", snapshot, report, path: path), client: client, state: &state)
        }
    }

    /// A stall past a hang limit: its report (always: the evidence of a hang; its final, if the stall ever ends,
    /// follows it) and a `stall.hang` line made durable, for the process may end right after it.
    private func writeHang(_ snapshot: StallSnapshot, action: String, afterMs: Double, client: ReportClient,
                           state: inout WriterState) {
        var report = build(snapshot, client: client, state: &state)
        report.hang = StallReport.Hang(action: action, afterMs: afterMs)
        let decision = state.admission.hang(snapshot.id)
        if decision.suppressedBefore > 0 { report.suppressedBefore = decision.suppressedBefore }
        HangRegistry.shared.noteTopFrame(id: snapshot.id, topFrame: report.topFrame?.displayName)
        let path = persist(report, client: client, state: &state)
        if path != nil { client.counters.interimReportsWritten.wrappingAdd(1, ordering: .relaxed) }
        var event = ongoingEvent("stall.hang", snapshot, report, path: path)
        event.action = action
        event.message = action == "abort"
            ? "hung past hang_abort_after_ms (\(Int(afterMs)) ms): the process ends with SIGABRT"
            : "hung past systemd_hang_after_ms (\(Int(afterMs)) ms): systemd's watchdog is no longer fed"
        log(event, client: client, state: &state, durable: true)
    }

    /// A snapshot on demand: its report (never offered to the sinks) and a `snapshot` line; the asker is answered.
    private func writeSnapshot(_ parts: [SnapshotCoordinator.Part], missing: Int, reply: SnapshotReply,
                               client: ReportClient, state: inout WriterState) {
        let report = Self.snapshotReport(parts, missing: missing,
                                         builder: state.reportBuilder(for: client.configuration.inApp))
        guard let path = persist(report, client: client, state: &state, toSinks: false) else {
            reply.finish(.failure("the report directory could not be written (see the service's log)"))
            return
        }
        var event = StallEvent(time: WallClock.iso8601(nanoseconds: WallClock.nowNanoseconds()), event: "snapshot")
        event.report = path
        event.count = report.snapshot?.entries.count
        event.message = missing > 0 ? "\(missing) watchdog(s) did not answer in time" : nil
        log(event, client: client, state: &state)
        Self.keepNewestSnapshots(in: directory, count: Self.snapshotsKept)
        reply.finish(.success(path))
    }

    /// The whole process did not run: a `process.frozen` line.
    private func logFreeze(_ loopName: String, _ nanoseconds: UInt64, client: ReportClient,
                           state: inout WriterState) {
        var event = StallEvent(time: WallClock.iso8601(nanoseconds: WallClock.nowNanoseconds()),
                               event: "process.frozen")
        event.loop = loopName
        event.durationMs = Double(nanoseconds) / 1e6
        event.message = "the process did not run (SIGSTOP, debugger or VM pause); not counted as a stall"
        log(event, client: client, state: &state)
    }

    /// A loop's window of iterations: a `loop.stats` line.
    private func logLoopStats(_ line: LoopStatsReporter.Line, threadID: Int32, client: ReportClient,
                              state: inout WriterState) {
        var event = StallEvent(time: WallClock.iso8601(nanoseconds: WallClock.nowNanoseconds()), event: "loop.stats")
        event.loop = line.loopName
        event.tid = threadID
        let window = line.window
        event.windowS = Double(window.elapsed.nanosecondsClamped) / 1e9
        event.iterations = Int(clamping: window.iterations)
        event.busyP50Ms = Self.milliseconds(window.busyHistogram, 0.5)
        event.busyP90Ms = Self.milliseconds(window.busyHistogram, 0.9)
        event.busyP99Ms = Self.milliseconds(window.busyHistogram, 0.99)
        event.busyMaxMs = Self.milliseconds(window.busyHistogram, 1)
        event.utilization = (window.utilization * 10_000).rounded() / 10_000
        log(event, client: client, state: &state)
    }

    /// A pool class's window of jobs: a `pool.stats` line.
    private func logPoolStats(_ window: PoolStatsReporter.Window, client: ReportClient, state: inout WriterState) {
        var event = StallEvent(time: WallClock.iso8601(nanoseconds: WallClock.nowNanoseconds()), event: "pool.stats")
        event.loop = window.poolClass.pool
        event.priority = window.poolClass.priority
        event.windowS = Double(window.elapsedNanoseconds) / 1e9
        event.jobs = Int(clamping: window.jobs)
        event.runP50Ms = Self.milliseconds(window.run, 0.5)
        event.runP90Ms = Self.milliseconds(window.run, 0.9)
        event.runP99Ms = Self.milliseconds(window.run, 0.99)
        event.runMaxMs = Self.milliseconds(window.run, 1)
        event.delayP50Ms = Self.milliseconds(window.delay, 0.5)
        event.delayP90Ms = Self.milliseconds(window.delay, 0.9)
        event.delayP99Ms = Self.milliseconds(window.delay, 0.99)
        event.delayMaxMs = Self.milliseconds(window.delay, 1)
        event.slowJobs = Int(clamping: window.slowJobs)
        event.longDelays = Int(clamping: window.longDelays)
        event.workers = window.workers
        event.utilization = (window.busyRatio * 10_000).rounded() / 10_000
        log(event, client: client, state: &state)
    }

    /// A histogram's percentile in milliseconds, for the statistics lines.
    private static func milliseconds(_ histogram: LoopBusyHistogram, _ fraction: Double) -> Double? {
        histogram.percentile(fraction).map { Double($0.nanosecondsClamped) / 1e6 }
    }

    /// A stall ended: its final report (unless the rate limit suppresses the stall; it is then counted) and a
    /// `stall.end` line either way.
    private func writeFinal(_ snapshot: StallSnapshot, client: ReportClient, state: inout WriterState) {
        let counters = client.counters
        var report = build(snapshot, client: client, state: &state)
        let decision = state.admission.final(
            snapshot.id, signature: report.signature, alreadyPublished: state.reportPaths[snapshot.id] != nil,
            limit: client.configuration.maxReportsPerSignaturePerHour, now: cstallmon_monotonic_ns())
        var path: String?
        if let decision, !decision.write {
            counters.reportsSuppressed.wrappingAdd(1, ordering: .relaxed)
        } else {
            if let before = decision?.suppressedBefore, before > 0 { report.suppressedBefore = before }
            path = persist(report, client: client, state: &state)
            if path != nil {
                counters.reportsWritten.wrappingAdd(1, ordering: .relaxed)
                client.written.increment()
                applyRetention(for: client)
            } else {
                counters.reportsDropped.wrappingAdd(1, ordering: .relaxed)
                client.dropped.increment()
            }
        }
        var event = baseEvent("stall.end", snapshot)
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
        state.reportPaths[snapshot.id] = nil
    }

    private func build(_ snapshot: StallSnapshot, client: ReportClient, state: inout WriterState) -> StallReport {
        if state.builders[client.configuration.inApp] == nil { symbolicatorsCreated.wrappingAdd(1, ordering: .relaxed) }
        let builder = state.reportBuilder(for: client.configuration.inApp)
        var report = builder.build(snapshot)
        if let phaseOfReport = client.phaseOfReport { report.phase = phaseOfReport(report) }
        report.mode = snapshot.mode
        report.job = snapshot.job
        // A hung stall's every ongoing report says so (each replaces the one before on disk); its final has none.
        report.hang = snapshot.hang
        if let text = snapshot.taskLabel?.text { report.label = text }
        report.traceId = snapshot.taskLabel?.traceId
        report.spanId = snapshot.taskLabel?.spanId
        if let starvation = snapshot.starvation {
            Self.describeStarvation(&report, starvation, builder: builder)
        }
        return report
    }

    /// A starved pool's report: each culprit built as a stall of its own (its stack, class, wait, signature), and
    /// the report's signature made of the culprits' set, so `stallmon report` groups starvations by who held the
    /// pool.
    private static func describeStarvation(_ report: inout StallReport, _ starvation: StarvationSnapshot,
                                           builder: ReportBuilder) {
        // A culprit's stack refers to the report's `frames` (made of every culprit's samples), not its own table.
        func key(_ frame: StallReport.Frame) -> String {
            "\(frame.address)|\(frame.symbol ?? "")|\(frame.file ?? "")|\(frame.line ?? -1)|\(frame.inlined ?? false)"
        }
        var position: [String: Int] = [:]
        for (index, frame) in report.frames.enumerated() where position[key(frame)] == nil { position[key(frame)] = index }
        let culprits = starvation.culprits.map { culprit in
            let built = builder.build(culprit.snapshot)
            let hottest = built.hottestStack.map { stack in
                HottestStack(frames: stack.frames.compactMap { built.frames.indices.contains($0)
                    ? position[key(built.frames[$0])] : nil }, samples: stack.samples, of: stack.of)
            }
            var described = StallReport.Culprit(
                thread: built.thread, job: culprit.snapshot.job, label: culprit.snapshot.taskLabel?.text,
                busyMs: Double(culprit.snapshot.durationNanoseconds) / 1e6, heldThroughout: culprit.heldThroughout,
                stallClass: built.stallClass, topFrame: built.topFrame, hottestStack: hottest,
                waitingOn: built.waitingOn, signature: built.signature, samples: built.samples.count)
            described.traceId = culprit.snapshot.taskLabel?.traceId
            described.spanId = culprit.snapshot.taskLabel?.spanId
            return described
        }
        report.kind = "starvation"
        report.starvation = StallReport.Starvation(
            verdict: starvation.verdict, saturatedMs: Double(starvation.saturatedNanoseconds) / 1e6,
            oldestWaitMs: Double(starvation.oldestWaitNanoseconds) / 1e6,
            waitedJobs: starvation.waitedJobs.map { Int(clamping: $0) }, jobsRun: starvation.jobsRun.map { Int(clamping: $0) },
            workers: starvation.workers, culprits: culprits)
        report.stallClass = starvation.verdict == "busy" ? .cpu : report.stallClass
        let held = culprits.filter(\.heldThroughout)
        // The culprits that held the pool name it; for a busy pool, every job seen on a worker.
        let signatures = Set((held.isEmpty ? culprits : held).compactMap(\.signature)).sorted()
        report.signature = signatures.isEmpty
            ? nil : StallAggregation.combine(["starvation"] + signatures)
        report.topFrame = (held.first ?? culprits.first)?.topFrame ?? report.topFrame
    }

    private func baseEvent(_ name: String, _ snapshot: StallSnapshot) -> StallEvent {
        // A starved pool's events are `starvation.begin` and `starvation.end`.
        let name = snapshot.starvation == nil ? name : name.replacingOccurrences(of: "stall.", with: "starvation.")
        var event = StallEvent(time: WallClock.iso8601(nanoseconds: WallClock.nowNanoseconds()), event: name)
        event.id = snapshot.id
        event.loop = snapshot.loopName
        event.tid = snapshot.threadID
        event.thresholdMs = Double(snapshot.thresholdNanoseconds) / 1e6
        event.label = snapshot.taskLabel?.text ?? (snapshot.labelID == 0 ? nil : LooperLabel(id: snapshot.labelID).name)
        event.traceId = snapshot.taskLabel?.traceId
        event.spanId = snapshot.taskLabel?.spanId
        event.mode = snapshot.mode
        event.job = snapshot.job
        return event
    }

    /// Writes the report (an interim one and its final replacement share a path). Returns the path, or nil after
    /// logging the failure once per change of state.
    private func persist(_ report: StallReport, client: ReportClient, state: inout WriterState,
                         toSinks: Bool = true) -> String? {
        let path = state.reportPaths[report.id] ?? reportPath(for: report)
        do {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .withoutEscapingSlashes]
            let bytes = Array(try encoder.encode(report))
            try AtomicFile.createDirectory(directory)
            // Sinks get the durable file before it is published: a report visible in the directory has always
            // reached every sink (e.g. the spool), even if the process dies between the two steps.
            try AtomicFile.write(bytes, to: path) { durable in
                guard toSinks else { return }
                handToSinks(WrittenStallReport(report: report, path: path, contentsPath: durable), client: client,
                            state: &state)
            }
            state.reportPaths[report.id] = path
            if state.failing != nil {
                client.logger.notice("stallmon: reports are being written again", metadata: [
                    "directory": "\(directory)", "dropped": "\(state.droppedSinceFailure)",
                    "previousError": "\(state.failingDescription)",
                ])
                state.failing = nil
                state.droppedSinceFailure = 0
            }
            return path
        } catch {
            let reason = "\(error)"
            // The state is what failed and why, not which (randomly named) temporary file.
            let key = (error as? FileError).map { "\($0.operation) \($0.errorNumber)" } ?? reason
            state.droppedSinceFailure += 1
            if state.failing != key {
                client.logger.error("stallmon: cannot write stall reports; dropping them until this is fixed",
                                    metadata: ["directory": "\(directory)", "error": "\(reason)"])
                state.failing = key
                state.failingDescription = reason
                var event = StallEvent(time: WallClock.iso8601(nanoseconds: WallClock.nowNanoseconds()),
                                       event: "monitor.error")
                event.message = "cannot write stall reports: \(reason)"
                log(event, client: client, state: &state)
            }
            return nil
        }
    }

    /// Hands a written report to every sink of the monitor that found the stall; failures are logged once per sink
    /// and change of state (StallmonUpload's sink leaves the report on disk for `stallmon upload` to pick up later).
    private func handToSinks(_ written: WrittenStallReport, client: ReportClient, state: inout WriterState) {
        for (index, sink) in client.sinks.enumerated() {
            let key = "\(ObjectIdentifier(client))/\(index)"
            let retryKey = key + "/" + written.path
            do {
                try sink.receive(written)
                state.sinkFailing[key] = nil
                state.refusedBySink[retryKey] = nil
            } catch {
                // Published all the same (it is on disk): offered to the sink again until it takes it.
                if state.refusedBySink.count < Self.maxRefusedReports || state.refusedBySink[retryKey] != nil {
                    state.refusedBySink[retryKey] = (written.report, written.path, client, index)
                }
                let reason = "\(error)"
                if state.sinkFailing[key] != reason {
                    state.sinkFailing[key] = reason
                    client.logger.error("stallmon: a report sink failed", metadata: [
                        "sink": "\(type(of: sink))", "report": "\(written.path)", "error": "\(reason)",
                    ])
                }
            }
        }
    }

    /// Reports refused by a sink kept for another offer, at most (beyond, a refused report is only logged).
    static let maxRefusedReports = 1024

    /// Offers each report a sink refused again, from its published file (a report removed meanwhile is forgotten).
    private func offerRefusedReportsAgain(_ state: inout WriterState) {
        for (retryKey, entry) in state.refusedBySink {
            guard access(entry.path, F_OK) == 0, entry.client.sinks.indices.contains(entry.sink) else {
                state.refusedBySink[retryKey] = nil
                continue
            }
            let sink = entry.client.sinks[entry.sink]
            let key = "\(ObjectIdentifier(entry.client))/\(entry.sink)"
            do {
                try sink.receive(WrittenStallReport(report: entry.report, path: entry.path, contentsPath: entry.path))
                state.refusedBySink[retryKey] = nil
                if state.sinkFailing[key] != nil {
                    state.sinkFailing[key] = nil
                    entry.client.logger.notice("stallmon: a report sink takes reports again; refused ones handed over",
                                               metadata: ["sink": "\(type(of: sink))"])
                }
            } catch {
                // Logged once when it began failing (handToSinks); tried again in a second.
            }
        }
    }

    /// Removes the oldest reports beyond `client`'s retention limits (never one still queued for upload); counts
    /// them and logs once per pass that removed any.
    private func applyRetention(for client: ReportClient) {
        let limits = client.retentionLimits
        let remove = ReportRetention.entriesToRemove(ReportRetention.list(directory), limits: limits,
                                                     now: WallClock.nowNanoseconds())
        guard !remove.isEmpty else { return }
        var removed = 0
        for entry in remove where unlink(directory + "/" + entry.name) == 0 { removed += 1 }
        try? AtomicFile.syncDirectory(directory)
        client.counters.reportsRemovedByRetention.wrappingAdd(removed, ordering: .relaxed)
        client.logger.notice("stallmon: removed old reports beyond the retention limits", metadata: [
            "directory": "\(directory)", "removed": "\(removed)", "oldest": "\(remove[0].name)",
            "limits": "\(limits.maxCount) reports, \(limits.maxBytes) bytes, \(client.configuration.reportMaxAge)",
        ])
    }

    private func reportPath(for report: StallReport) -> String {
        let stamp = report.start.wall.filter { $0 != "-" && $0 != ":" }
        let prefix = report.kind == "snapshot" ? "snapshot" : "stall"
        return "\(directory)/\(prefix)-\(stamp)-\(report.id.prefix(8)).json"
    }

    /// Snapshots kept in a report directory (the newest; they are never uploaded).
    static let snapshotsKept = 100

    /// Removes all but the newest `count` snapshot reports (their names sort by time).
    private static func keepNewestSnapshots(in directory: String, count: Int) {
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [])
            .filter { $0.hasPrefix("snapshot-") && $0.hasSuffix(".json") }.sorted()
        for name in names.dropLast(count) { unlink(directory + "/" + name) }
    }

    /// A snapshot's report: the parts' samples symbolicated as one stall's would be, each part pointing at its own.
    private static func snapshotReport(_ parts: [SnapshotCoordinator.Part], missing: Int,
                                       builder: ReportBuilder) -> StallReport {
        let now = cstallmon_monotonic_ns()
        let wall = WallClock.nowNanoseconds()
        var sampleOf: [Int: Int] = [:]
        var samples: [RawSample] = []
        for (index, part) in parts.enumerated() {
            guard let sample = part.sample else { continue }
            sampleOf[index] = samples.count
            samples.append(sample)
        }
        let first = parts.first { $0.tid != nil }
        let snapshot = StallSnapshot(
            id: UUID().uuidString.lowercased(), loopName: "snapshot", threadID: first?.tid ?? 0,
            thresholdNanoseconds: 0, since: now, sinceWall: wall, durationNanoseconds: 0, durationExact: false,
            ongoing: false, elapsedAtDetection: 0, labelID: 0, samples: samples)
        var report = builder.build(snapshot)
        report.kind = "snapshot"
        report.durationSource = "snapshot"
        report.signature = nil
        report.topFrame = nil
        report.hottestStack = nil
        report.callTree = nil
        report.stallClass = nil
        report.threadStats = nil
        report.annotations = missing > 0 ? ["unanswered": "\(missing)"] : nil
        let entries = parts.enumerated().map { index, part -> StallReport.Snapshot.Entry in
            let sample = sampleOf[index]
            var topFrame: StallReport.FrameSummary?
            if let sample, report.samples.indices.contains(sample),
               let frame = report.samples[sample].frames.first(where: { report.frames.indices.contains($0) && report.frames[$0].inApp }) {
                let described = report.frames[frame]
                topFrame = StallReport.FrameSummary(symbol: described.symbol ?? described.address,
                                                    file: described.file, line: described.line)
            }
            let label = part.taskLabel?.text ?? (part.labelID == 0 ? nil : LooperLabel(id: part.labelID).name)
            var entry = StallReport.Snapshot.Entry(
                name: part.name, kind: part.kind,
                thread: part.tid.map { StallReport.ThreadDescription(tid: $0, name: threadName(of: $0)) },
                state: part.busySince == nil ? "idle" : "busy",
                busyMs: part.busySince.map { Double(now &- min(now, $0)) / 1e6 }, label: label, job: part.job,
                sample: sample, topFrame: topFrame, note: part.note)
            entry.traceId = part.taskLabel?.traceId
            entry.spanId = part.taskLabel?.spanId
            return entry
        }
        report.snapshot = StallReport.Snapshot(entries: entries)
        return report
    }

    /// The event line of a report written while its stall goes on (`stall.interim`, `stall.hang`).
    private func ongoingEvent(_ name: String, _ snapshot: StallSnapshot, _ report: StallReport,
                              path: String?) -> StallEvent {
        var event = baseEvent(name, snapshot)
        event.durationMs = report.durationMs
        event.topFrame = report.topFrame?.displayName
        event.samples = report.samples.count
        event.report = path
        event.phase = report.phase
        return event
    }

    private func log(_ event: StallEvent, client: ReportClient, state: inout WriterState, durable: Bool = false) {
        do {
            try state.eventLog(for: client.configuration).append(event, durable: durable)
        } catch {
            client.counters.eventsDropped.wrappingAdd(1, ordering: .relaxed)
        }
    }
}

/// Where a snapshot's writer puts its outcome, for the control socket's thread that waits for it.
final class SnapshotReply: Sendable {
    enum Outcome: Sendable {
        case success(String)
        case failure(String)
    }

    private let outcome = Mutex<Outcome?>(nil)
    private let done = DispatchSemaphore(value: 0)

    func finish(_ result: Outcome) {
        outcome.withLock { $0 = result }
        done.signal()
    }

    /// Waits up to `timeout`; nil when the writer did not answer in time.
    func wait(timeout: Duration) -> Outcome? {
        guard done.wait(timeout: .now() + .nanoseconds(Int(timeout.nanosecondsClamped))) == .success else { return nil }
        return outcome.withLock { $0 }
    }
}
