import CStallmonLoopShims
import Foundation
import Logging
import Metrics
import StallmonLoop
import StallmonReport
import Synchronization

/// The writer thread: symbolicates, writes reports atomically, appends to the event log. The watchdog hands it
/// messages through a bounded queue and never waits for it; when the queue is full the report is dropped and
/// counted rather than delaying detection.
final class ReportWriter: Sendable {
    enum Message: Sendable {
        case begin(StallSnapshot)
        case interim(StallSnapshot)
        case finish(StallSnapshot)
        /// The whole process did not run for this long (SIGSTOP, debugger, VM pause): logged, never a stall.
        case frozen(loopName: String, nanoseconds: UInt64)
    }

    static let queueLimit = 256

    private let configuration: StallMonitorConfiguration
    private let logger: Logger
    private let counters: MonitorCounters
    private let queue = Mutex<(messages: [Message], stopping: Bool)>(([], false))
    private let wakeSignal = WakeSignal()
    /// Why this thread's wake-up signal could not be created (the monitor then refuses to start).
    var setupError: FileError? { wakeSignal.creationError }
    private let thread = Mutex<PosixThread?>(nil)
    private let written: Counter
    private let dropped: Counter
    private let sinks: [any StallReportSink]

    init(configuration: StallMonitorConfiguration, logger: Logger, counters: MonitorCounters, loopName: String,
         sinks: [any StallReportSink]) {
        self.configuration = configuration
        self.sinks = sinks
        self.logger = logger
        self.counters = counters
        written = Counter(label: "stallmon_reports_written_total", dimensions: [("loop", loopName)])
        dropped = Counter(label: "stallmon_reports_dropped_total", dimensions: [("loop", loopName)])
    }

    func start() {
        let started = PosixThread.start(name: "stallmon-writer") { [self] in run() }
        if started == nil { logger.error("stallmon: cannot start the report writer thread; reports will be dropped") }
        thread.withLock { $0 = started }
    }

    /// Finishes what is queued, then joins the thread.
    func stop() {
        queue.withLock { $0.stopping = true }
        wakeSignal.wake()
        let running = thread.withLock { thread in
            defer { thread = nil }
            return thread
        }
        running?.join()
    }

    /// Queues a message; never blocks. Returns false (and counts a drop) when the queue is full.
    @discardableResult
    func submit(_ message: Message) -> Bool {
        let accepted = queue.withLock { state in
            guard state.messages.count < Self.queueLimit, !state.stopping else { return false }
            state.messages.append(message)
            return true
        }
        if accepted {
            wakeSignal.wake()
        } else if case .finish = message {
            counters.reportsDropped.wrappingAdd(1, ordering: .relaxed)
            dropped.increment()
        }
        return accepted
    }

    // MARK: - Writer thread

    private func run() {
        var state = WriterState(configuration: configuration)
        // Temporary files of writes a killed process never finished are not reports.
        AtomicFile.removeAbandonedTemporaryFiles(in: configuration.reportDirectory)
        applyRetention()
        while true {
            wakeSignal.wait(until: nil)
            let (batch, stopping) = queue.withLock { state in
                defer { state.messages.removeAll(keepingCapacity: true) }
                return (state.messages, state.stopping)
            }
            for message in batch { handle(message, state: &state) }
            if stopping && queue.withLock({ $0.messages.isEmpty }) { return }
        }
    }

    /// Writer-thread-only state.
    private struct WriterState {
        let eventLog: EventLog
        var builder: ReportBuilder?
        var failing: String?
        var failingDescription = ""
        /// Per sink: the last failure logged, until it succeeds again.
        var sinkFailing: [Int: String] = [:]
        var droppedSinceFailure = 0
        var reportPaths: [String: String] = [:]
        var limiter: SignatureRateLimiter

        init(configuration: StallMonitorConfiguration) {
            inAppRules = configuration.inApp
            limiter = SignatureRateLimiter(limit: configuration.maxReportsPerSignaturePerHour,
                                           window: 3600 * 1_000_000_000)
            eventLog = EventLog(path: configuration.resolvedEventLogPath, maxBytes: configuration.eventLogMaxBytes,
                                maxFiles: configuration.eventLogMaxFiles)
        }

        let inAppRules: InAppRules

        mutating func reportBuilder() -> ReportBuilder {
            if let builder { return builder }
            let made = ReportBuilder(symbolicator: Symbolicator(inAppRules: inAppRules))
            builder = made
            return made
        }
    }

    private func handle(_ message: Message, state: inout WriterState) {
        switch message {
        case .begin(let snapshot):
            let report = state.reportBuilder().build(snapshot)
            var event = baseEvent("stall.begin", snapshot)
            event.elapsedMs = Double(snapshot.elapsedAtDetection) / 1e6
            event.topFrame = report.topFrame?.displayName
            log(event, state: &state)
        case .interim(let snapshot):
            let report = state.reportBuilder().build(snapshot)
            if let path = persist(report, state: &state) {
                counters.interimReportsWritten.wrappingAdd(1, ordering: .relaxed)
                var event = baseEvent("stall.interim", snapshot)
                event.durationMs = report.durationMs
                event.topFrame = report.topFrame?.displayName
                event.samples = report.samples.count
                event.report = path
                log(event, state: &state)
            }
        case .frozen(let loopName, let nanoseconds):
            var event = StallEvent(time: WallClock.iso8601(nanoseconds: WallClock.nowNanoseconds()),
                                   event: "process.frozen")
            event.loop = loopName
            event.durationMs = Double(nanoseconds) / 1e6
            event.message = "the process did not run (SIGSTOP, debugger or VM pause); not counted as a stall"
            log(event, state: &state)
        case .finish(let snapshot):
            var report = state.reportBuilder().build(snapshot)
            // An interim report already on disk is always replaced by its final one.
            if state.reportPaths[snapshot.id] == nil, let signature = report.signature {
                let decision = state.limiter.admit(signature, now: cstallmon_loop_monotonic_ns())
                guard decision.write else {
                    counters.reportsSuppressed.wrappingAdd(1, ordering: .relaxed)
                    var event = baseEvent("stall.end", snapshot)
                    event.durationMs = report.durationMs
                    event.topFrame = report.topFrame?.displayName
                    event.stallClass = report.stallClass
                    event.signature = signature
                    event.suppressed = true
                    log(event, state: &state)
                    return
                }
                if decision.suppressedBefore > 0 { report.suppressedBefore = decision.suppressedBefore }
            }
            let path = persist(report, state: &state)
            if path != nil {
                counters.reportsWritten.wrappingAdd(1, ordering: .relaxed)
                written.increment()
                applyRetention()
            } else {
                counters.reportsDropped.wrappingAdd(1, ordering: .relaxed)
                dropped.increment()
            }
            var event = baseEvent("stall.end", snapshot)
            event.durationMs = report.durationMs
            event.topFrame = report.topFrame?.displayName
            event.samples = report.samples.count
            event.report = path
            event.stallClass = report.stallClass
            event.signature = report.signature
            log(event, state: &state)
            state.reportPaths[snapshot.id] = nil
        }
    }

    private func baseEvent(_ name: String, _ snapshot: StallSnapshot) -> StallEvent {
        var event = StallEvent(time: WallClock.iso8601(nanoseconds: WallClock.nowNanoseconds()), event: name)
        event.id = snapshot.id
        event.loop = snapshot.loopName
        event.tid = snapshot.threadID
        event.thresholdMs = Double(snapshot.thresholdNanoseconds) / 1e6
        event.label = snapshot.labelID == 0 ? nil : LooperLabel(id: snapshot.labelID).name
        return event
    }

    /// Writes the report (an interim one and its final replacement share a path). Returns the path, or nil after
    /// logging the failure once per change of state.
    private func persist(_ report: StallReport, state: inout WriterState) -> String? {
        let path = state.reportPaths[report.id] ?? reportPath(for: report)
        do {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .withoutEscapingSlashes]
            let bytes = Array(try encoder.encode(report))
            try AtomicFile.createDirectory(configuration.reportDirectory)
            // Sinks get the durable file before it is published: a report visible in the directory has always
            // reached every sink (e.g. the spool), even if the process dies between the two steps.
            try AtomicFile.write(bytes, to: path) { durable in
                handToSinks(WrittenStallReport(report: report, path: path, contentsPath: durable), state: &state)
            }
            state.reportPaths[report.id] = path
            if state.failing != nil {
                logger.notice("stallmon: reports are being written again", metadata: [
                    "directory": "\(configuration.reportDirectory)", "dropped": "\(state.droppedSinceFailure)",
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
                logger.error("stallmon: cannot write stall reports; dropping them until this is fixed", metadata: [
                    "directory": "\(configuration.reportDirectory)", "error": "\(reason)",
                ])
                state.failing = key
                state.failingDescription = reason
                var event = StallEvent(time: WallClock.iso8601(nanoseconds: WallClock.nowNanoseconds()),
                                       event: "monitor.error")
                event.message = "cannot write stall reports: \(reason)"
                log(event, state: &state)
            }
            return nil
        }
    }

    /// Hands a written report to every sink; failures are logged once per sink and change of state (StallmonUpload's
    /// sink leaves the report on disk for `stallmon upload` to pick up later).
    private func handToSinks(_ written: WrittenStallReport, state: inout WriterState) {
        for (index, sink) in sinks.enumerated() {
            do {
                try sink.receive(written)
                state.sinkFailing[index] = nil
            } catch {
                let reason = "\(error)"
                if state.sinkFailing[index] != reason {
                    state.sinkFailing[index] = reason
                    logger.error("stallmon: a report sink failed", metadata: [
                        "sink": "\(type(of: sink))", "report": "\(written.path)", "error": "\(reason)",
                    ])
                }
            }
        }
    }

    /// Removes the oldest reports beyond the retention limits (never one still queued for upload); counts them and
    /// logs once per pass that removed any.
    private func applyRetention() {
        let limits = ReportRetention.Limits(maxCount: configuration.reportMaxCount,
                                            maxBytes: configuration.reportMaxBytes,
                                            maxAgeNanoseconds: UInt64(configuration.reportMaxAge.nanosecondsClamped))
        let directory = configuration.reportDirectory
        let remove = ReportRetention.entriesToRemove(ReportRetention.list(directory), limits: limits,
                                                     now: WallClock.nowNanoseconds())
        guard !remove.isEmpty else { return }
        var removed = 0
        for entry in remove where unlink(directory + "/" + entry.name) == 0 { removed += 1 }
        try? AtomicFile.syncDirectory(directory)
        counters.reportsRemovedByRetention.wrappingAdd(removed, ordering: .relaxed)
        logger.notice("stallmon: removed old reports beyond the retention limits", metadata: [
            "directory": "\(directory)", "removed": "\(removed)", "oldest": "\(remove[0].name)",
            "limits": "\(limits.maxCount) reports, \(limits.maxBytes) bytes, \(configuration.reportMaxAge)",
        ])
    }

    private func reportPath(for report: StallReport) -> String {
        let stamp = report.start.wall.filter { $0 != "-" && $0 != ":" }
        let directory = configuration.reportDirectory.hasSuffix("/")
            ? String(configuration.reportDirectory.dropLast()) : configuration.reportDirectory
        return "\(directory)/stall-\(stamp)-\(report.id.prefix(8)).json"
    }

    private func log(_ event: StallEvent, state: inout WriterState) {
        do {
            try state.eventLog.append(event)
        } catch {
            counters.eventsDropped.wrappingAdd(1, ordering: .relaxed)
        }
    }
}
