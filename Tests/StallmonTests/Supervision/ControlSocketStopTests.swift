import Foundation
import InMemoryLogging
import Logging
@testable import Stallmon
import StallmonLoop
import StallmonTestSupport
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Issue 32 (5d): `stop()` bounded as a whole. A snapshot request waiting for a blocked report writer held the
/// control socket's thread, and so `stop()`, for the rest of its 10 s wait for the writer's outcome, after `stop()`
/// had already waited the writer's 5 s.
@Suite(.serialized)
struct ControlSocketStopTests {
    /// What the asking thread got back.
    final class Asked: Sendable {
        let outcome = Mutex<ControlSocketClient.Outcome?>(nil)
        let done = DispatchSemaphore(value: 0)
    }

    @Test func stopDoesNotWaitOutASnapshotForABlockedWriter() throws {
        let reports = makeTemporaryDirectory()
        // The event log locked through a descriptor of the test's own (a flock belongs to the open file, so the
        // writer's open is shut out exactly as by another process): the writer writes the snapshot's report, then
        // blocks on the snapshot's event line, before it gives the control socket its outcome.
        let holder = open(reports + "/events.jsonl", O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        try #require(holder >= 0, "errno \(errno)")
        defer { close(holder) }  // the writer, left running by stop(), then finishes on its own
        try #require(flock(holder, LOCK_EX) == 0)
        var configuration = StallMonitorConfiguration(detection: .init(threshold: .milliseconds(50)),
                                                      reports: .init(directory: reports))
        configuration.analysis.loopStatsInterval = .zero  // no other event line blocks the writer first
        let logs = InMemoryLogHandler()
        let monitor = try LooperStallMonitor(loop: try Looper(name: "control-stop"), configuration: configuration,
                                             logger: Logger(label: "control-stop") { _ in logs })
        monitor.start()
        let socket = ControlSocketClient.path(directory: reports, pid: getpid())
        let asked = Asked()
        Thread {
            let result = ControlSocketClient.requestSnapshot(at: socket, timeout: .seconds(30))
            asked.outcome.withLock { $0 = result }
            asked.done.signal()
        }.start()
        let written = eventually(timeout: .seconds(10)) {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: reports)) ?? []
            return names.contains { $0.hasPrefix("snapshot-") }
        }
        #expect(written, "the snapshot's report is written; its event line blocks the writer")

        let started = ContinuousClock.now
        monitor.stop()
        let took = ContinuousClock.now - started
        // The writer's 5 s (`ReportPipeline.writerTimeout`), then the control socket's stop at once: the snapshot's
        // wait for the writer is ended rather than run out (it used to make this ~10 s).
        #expect(took < .seconds(7), "stop() took \(took)")
        #expect(asked.done.wait(timeout: .now() + 5) == .success, "the asking client was answered or cut off")
        if case .success(let path) = asked.outcome.withLock({ $0 }) {
            Issue.record("a snapshot reported written while the writer was blocked: \(path)")
        }
        let errors = logs.entries.filter { $0.level == .error }.map { "\($0.message)" }
        #expect(errors.contains { $0.contains("report writer, which is blocked") }, "\(errors)")
    }

    /// A pipeline of the directory that left while a new one started (a monitor stopped as another starts): the new
    /// one unlinked the old socket, which no longer answered, and bound its own; the old one's stop then removed the
    /// new file by its path, leaving the new socket unreachable. Now a stop removes only the file it bound.
    @Test func stoppingASocketLeavesTheFileAnotherBoundSinceAlone() throws {
        let reports = makeTemporaryDirectory()
        let configuration = StallMonitorConfiguration(reports: .init(directory: reports))
        let client = PipelineMember(configuration: configuration, logger: Logger(label: "control-replaced"),
                                   counters: MonitorCounters(), loopName: "replaced", sinks: [])
        let writer = ReportWriter(directory: reports)
        let old = try #require(ControlSocket.start(directory: reports, writer: writer, client: client))
        let path = old.path
        #expect(unlink(path) == 0)  // as the new pipeline does with a socket that no longer answers
        let new = try #require(ControlSocket.start(directory: reports, writer: writer, client: client))
        old.stop()
        #expect(access(path, F_OK) == 0, "the new socket's file is still there")
        #expect(ControlSocketClient.isAnswering(path), "and answers")
        new.stop()
        #expect(access(path, F_OK) != 0, "its own stop removes it")
    }
}
