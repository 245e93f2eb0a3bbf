import Synchronization

/// Everything downstream of the watchdog, once per process and report directory: one writer thread, one
/// symbolicator (libdw maps symbol tables and DWARF once, not once per loop), one event-log writer per file, and
/// each sink started once however many monitors were given it.
///
/// Monitors join when they are created and leave when they stop; the pipeline lives while any monitor uses it and
/// stops (queued reports written, writer thread joined) after the last one left. A monitor that joins later gets a
/// fresh pipeline. Settings stay the monitor's own: each report is written with the configuration of the monitor
/// that found the stall (event log, in-app rules, retention limits, rate limit, sinks).
final class ReportPipeline: Sendable {
    /// The report directory this pipeline writes to, as configured (without trailing slashes).
    let directory: String
    let writer: ReportWriter
    private let members = Mutex<Members>(Members())
    /// The directory's control socket (snapshots on demand), from the first started member that wants one until the
    /// last member leaves.
    private let control = Mutex<ControlSocket?>(nil)

    private struct Members {
        /// The members, by identity: a client that leaves twice (a monitor whose set-up failed after it joined, then
        /// stopped by its deinit) counts once, so it never takes the pipeline from the monitors still using it.
        var clients: Set<ObjectIdentifier> = []
        /// Sinks started by a member, by object identity, with how many started members use each.
        var sinkUsers: [ObjectIdentifier: Int] = [:]
    }

    private static let registry = Mutex<[String: ReportPipeline]>([:])

    private init(directory: String) {
        self.directory = directory
        writer = ReportWriter(directory: directory)
    }

    /// The pipeline for `client`'s report directory, started if this is its first member. Throws when a new
    /// pipeline's writer cannot get its wake-up eventfd.
    static func join(_ client: PipelineMember) throws(FileError) -> ReportPipeline {
        let key = normalized(client.configuration.reports.directory)
        let result: Result<ReportPipeline, FileError> = registry.withLock { registry in
            if let existing = registry[key] {
                existing.members.withLock { _ = $0.clients.insert(ObjectIdentifier(client)) }
                return .success(existing)
            }
            let made = ReportPipeline(directory: key)
            if let failure = made.writer.setupError { return .failure(failure) }
            made.members.withLock { _ = $0.clients.insert(ObjectIdentifier(client)) }
            made.writer.start(firstClient: client)
            registry[key] = made
            return .success(made)
        }
        return try result.get()
    }

    /// The running pipeline of `directory`, if any monitor uses one.
    static func existing(for directory: String) -> ReportPipeline? {
        registry.withLock { $0[normalized(directory)] }
    }

    /// How long leaving waits for the writer, at most: `stop()` never hangs on a blocked writer.
    static let writerTimeout: Duration = .seconds(5)

    /// Starts those of `client`'s sinks that no other member started yet.
    func startSinks(of client: PipelineMember) {
        let toStart = members.withLock { members in
            client.sinks.filter { sink in
                guard let key = Self.identity(of: sink) else { return true }
                defer { members.sinkUsers[key, default: 0] += 1 }
                return members.sinkUsers[key] == nil
            }
        }
        for sink in toStart { sink.start() }
    }

    /// Opens the control socket for `client`'s report directory (which exists by now), unless one is open or its
    /// configuration turned it off.
    func startControlSocket(for client: PipelineMember) {
        guard client.configuration.hangs.controlSocket else { return }
        control.withLock { control in
            guard control == nil else { return }
            control = ControlSocket.start(directory: directory, writer: writer, client: client)
        }
    }

    /// Leaves the pipeline: waits until everything `client` submitted is written, stops the sinks only it still
    /// used (each within `sinkDeadline`), and stops the writer if it was the last member.
    ///
    /// How long it takes, at most: `writerTimeout` (5 s) for the writer, its flush and its join together, plus, for the
    /// last member, the control socket's stop (`ControlSocket.stop()`: at once when the process has one report
    /// directory and no collection is under way; otherwise at most 2 s, plus 2 s per other report directory, when a
    /// snapshot's collection is under way) and at most 100 ms more for the join when that stop left less than that
    /// of the 5 s; then up to `sinkDeadline` for each sink only this member used. With one report directory and no
    /// sink of its own: 5.1 s.
    func leave(_ client: PipelineMember, sinksStarted: Bool, sinkDeadline: Duration) {
        let started = ContinuousClock.now
        let unwritten = writer.flush(timeout: Self.writerTimeout)
        if unwritten > 0 {
            client.logger.error("""
                stallmon: stopping without waiting any longer for the report writer, which is blocked (an event log \
                locked by another process, a hung fsync, or a sink): some reports and event lines are not written \
                yet; they are if it gets unblocked before the process exits
                """, metadata: ["directory": "\(directory)", "unwritten": "\(unwritten)",
                                "waited": "\(Self.writerTimeout)"])
        }
        let membership: (wasMember: Bool, last: Bool) = Self.registry.withLock { registry in
            let (wasMember, remaining) = members.withLock { members in
                (members.clients.remove(ObjectIdentifier(client)) != nil, members.clients.count)
            }
            guard wasMember else { return (false, false) }
            if remaining == 0, registry[directory] === self { registry[directory] = nil }
            return (true, remaining == 0)
        }
        guard membership.wasMember else { return }
        let last = membership.last
        let toStop: [any StallReportSink] = sinksStarted ? members.withLock { members in
            client.sinks.filter { sink in
                guard let key = Self.identity(of: sink) else { return true }
                let users = (members.sinkUsers[key] ?? 1) - 1
                members.sinkUsers[key] = users > 0 ? users : nil
                return users <= 0
            }
        } : []
        if last {
            control.withLock { control in
                control?.stop()
                control = nil
            }
            let left = Self.writerTimeout - (ContinuousClock.now - started)
            if !writer.stop(timeout: unwritten > 0 ? .zero : max(left, .milliseconds(100))) && unwritten == 0 {
                client.logger.error("stallmon: the report writer did not finish in time and was left running",
                                    metadata: ["directory": "\(directory)"])
            }
        }
        for sink in toStop { sink.stop(deadline: sinkDeadline) }
    }

    private static func normalized(_ directory: String) -> String {
        var path = directory
        while path.count > 1 && path.hasSuffix("/") { path.removeLast() }
        return path
    }

    /// A class instance is one sink however many monitors were given it; a value is its own sink each time.
    private static func identity(of sink: any StallReportSink) -> ObjectIdentifier? {
        guard type(of: sink) is AnyClass else { return nil }
        return ObjectIdentifier(sink as AnyObject)
    }
}
