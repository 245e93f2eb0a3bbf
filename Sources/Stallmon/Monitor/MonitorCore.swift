import CStallmonCapture
import CStallmonLoopShims
import Logging
import StallmonReport
import Synchronization

/// What every monitor is, whatever it watches: the sampling signal it holds, its place in the shared
/// `ReportPipeline` of its report directory, its `ProbeSource` as a member of the process's one watchdog
/// (`Watchdog.process`), its counters, and its life (start once, stop once, systemd's watchdog fed in between). A
/// loop's monitor (`LoopThreadMonitor`) gives it a loop thread's source; the global executor's (`ConcurrencyStallMonitor`)
/// the pool workers' source.
package final class MonitorCore: Sendable {
    let name: String
    let configuration: StallMonitorConfiguration
    /// The sampling signal this monitor holds.
    let signalNumber: Int32
    let counters = MonitorCounters()
    private let client: PipelineMember
    private let pipeline: ReportPipeline
    private let watchdog = Watchdog.process
    private let member: Watchdog.Member
    private let state = Mutex<(started: Bool, stopped: Bool)>((false, false))
    /// Held through `start` and `stop`, so a stop that races a start finds it done (its source added, systemd's
    /// notifier retained) and undoes all of it, never half.
    private let lifecycle = Mutex<Void>(())
    /// This monitor feeds systemd's watchdog (`SystemdNotifier`) between start and stop.
    private let feedsSystemd = Atomic<Bool>(false)

    /// Validates `configuration`, takes the sampling signal, holds the process's watchdog, joins the pipeline of
    /// its report directory and makes the source `makeSource` builds. Nothing that can fail comes after the pipeline
    /// is joined: a monitor that throws never leaves a pipeline that another monitor uses.
    init(name: String, configuration: StallMonitorConfiguration, logger: Logger, sinks: [any StallReportSink],
         makeSource: (StallTracker.Collaborators) -> any ProbeSource) throws(StallMonitorError) {
        try Self.check(configuration, sinks: sinks)
        let signalNumber: Int32
        do {
            signalNumber = try configuration.detection.signal.resolve()
        } catch {
            throw StallMonitorError(description: error.description)
        }
        // Before the first system call a hardened unit may kill the service for (process_vm_readv at install).
        try SystemCallFilter.checkAtStart(logger: logger)
        var message = [CChar](repeating: 0, count: 512)
        guard cstallmon_install(signalNumber, &message, message.count) == 0 else {
            let text = String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            throw StallMonitorError(description: "cannot take the sampling signal: \(text)")
        }
        do {
            try Watchdog.process.retain()
        } catch {
            cstallmon_release()
            throw StallMonitorError(description: "cannot create the monitor's wake-up eventfd (watchdog): \(error)")
        }
        self.name = name
        self.configuration = configuration
        self.signalNumber = signalNumber
        client = PipelineMember(configuration: configuration, logger: logger, counters: counters, loopName: name,
                              sinks: sinks)
        do {
            pipeline = try ReportPipeline.join(client)
        } catch {
            Watchdog.process.release()
            cstallmon_release()
            throw StallMonitorError(
                description: "cannot create the monitor's wake-up eventfd (report writer): \(error)")
        }
        let source = makeSource(.process(client: client, writer: pipeline.writer, name: name))
        member = Watchdog.Member(source: source, name: name, client: client, writer: pipeline.writer)
    }

    deinit {
        stop()
    }

    /// Throws when `configuration` is invalid or asks for spooling or upload that none of `sinks` carries out.
    /// `init` runs it first; a monitor of several loops runs it once before setting any loop up.
    static func check(_ configuration: StallMonitorConfiguration,
                      sinks: [any StallReportSink]) throws(StallMonitorError) {
        do {
            try configuration.validate()
        } catch {
            throw StallMonitorError(description: error.description)
        }
        // An existing directory another user could steer is refused now, before anything starts; one created later
        // is checked again before every write.
        do {
            try DirectoryTrust.verifyIfPresent(configuration.reports.directory)
            try DirectoryTrust.verifyIfPresent(AtomicFile.parentDirectory(of: configuration.reports.resolvedEventLogPath))
        } catch {
            throw StallMonitorError(description: "stallmon: \(error)")
        }
        if configuration.upload.spoolEnabled && !sinks.contains(where: \.handlesUploadConfiguration) {
            throw StallMonitorError(description: "the configuration asks for "
                + (configuration.upload.endpoint != nil ? "upload (upload_endpoint)" : "spooling (spool = on)")
                + " but no sink carries it out: link the StallmonUpload product and pass "
                + "`sinks: [try UploadSink(configuration: configuration, logger: logger)]`")
        }
    }

    /// Starts the sinks not yet started and the control socket, and adds the source to the watchdog (starting its
    /// thread if no monitor did yet); `beforeWatching` runs first (a loop's probe starts counting). Returns false
    /// when it was already started or stopped. Logs (once) when the watchdog thread cannot be created.
    @discardableResult
    func start(beforeWatching: () -> Void = {}) -> Bool {
        lifecycle.withLock { _ in startAlone(beforeWatching: beforeWatching) }
    }

    private func startAlone(beforeWatching: () -> Void) -> Bool {
        let shouldStart = state.withLock { state in
            guard !state.started, !state.stopped else { return false }
            state.started = true
            return true
        }
        guard shouldStart else { return false }
        // The directory exists from the start, so `stallmon report DIR` says "No stalls recorded" for a service that
        // never stalled rather than "no such directory". A failure is not logged here: every write retries it, and
        // the writer logs it once, with the reports it drops.
        try? AtomicFile.createDirectory(configuration.reports.directory)
        beforeWatching()
        pipeline.startSinks(of: client)
        pipeline.startControlSocket(for: client)
        feedsSystemd.store(watchdog.systemd.retain(configuration, logger: client.logger), ordering: .relaxed)
        if !watchdog.add(member) {
            client.logger.error("stallmon: cannot start the watchdog thread; stalls will not be detected",
                                metadata: ["loop": "\(name)"])
        }
        return true
    }

    /// Removes the source from the watchdog (a stall in progress is written as ongoing), waits until the pipeline
    /// wrote this monitor's reports, stops the sinks no other monitor uses (up to 2 s each; the writer is waited for
    /// at most 5 s), runs `releaseThreads` (the capture slots its source still owns), lets the watchdog go (the last
    /// monitor joins its thread) and gives the sampling signal back. Idempotent.
    func stop(releaseThreads: () -> Void = {}) {
        lifecycle.withLock { _ in stopAlone(releaseThreads: releaseThreads) }
    }

    private func stopAlone(releaseThreads: () -> Void) {
        let started: Bool? = state.withLock { state in
            guard !state.stopped else { return nil }
            state.stopped = true
            return state.started
        }
        guard let started else { return }
        watchdog.remove(member)
        if feedsSystemd.exchange(false, ordering: .relaxed) { watchdog.systemd.release() }
        pipeline.leave(client, sinksStarted: started, sinkDeadline: .seconds(2))
        releaseThreads()
        watchdog.release()
        cstallmon_release()
    }

    /// True once `stop()` began.
    var isStopped: Bool { state.withLock { $0.stopped } }
}
