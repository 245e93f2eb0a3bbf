import Foundation
import InMemoryLogging
import Logging
import Stallmon
import StallmonLoop
import StallmonTestSupport
import Testing

/// Issue 26 (3): `stop()` waited without a bound for the report writer, which blocks in `flock` while another
/// process holds the event log (or in a hung `fsync`, or in a sink): a service's graceful shutdown hung with it.
@Suite("Fault: the report writer blocked")
struct FaultBlockedWriterTests {
    @Test("the event log locked by another process during a stall: stop() returns in bounded time and says so")
    func stopIsBoundedWhileTheEventLogIsLockedElsewhere() throws {
        let directory = makeTemporaryDirectory()
        let eventLog = directory + "/events.jsonl"
        // Another process holds the event log's lock, as `flock -x` does, for longer than the test.
        let holder = try ChildProcess("/usr/bin/flock", ["-x", eventLog, "sleep", "60"],
                                      environment: ProcessInfo.processInfo.environment)
        defer { _ = holder.kill() }
        var waited = 0
        while !FileManager.default.fileExists(atPath: eventLog) && waited < 200 {
            usleep(10_000)
            waited += 1
        }
        // The lock is taken just after the file is created: until then a non-blocking try of our own succeeds.
        let probe = open(eventLog, O_RDONLY | O_CLOEXEC)
        try #require(probe >= 0)
        defer { close(probe) }
        var polled = 0
        while flock(probe, LOCK_EX | LOCK_NB) == 0 && polled < 3_000 {
            flock(probe, LOCK_UN)
            usleep(10_000)
            polled += 1
        }
        try #require(polled < 3_000, "flock -x never took the lock")
        let logs = InMemoryLogHandler()
        let configuration = StallMonitorConfiguration(detection: .init(threshold: .milliseconds(50)),
                                                      reports: .init(directory: directory))
        let loop = try Looper(name: "blocked-writer")
        let monitor = try LooperStallMonitor(loop: loop, configuration: configuration,
                                             logger: Logger(label: "test") { _ in logs })
        monitor.start()
        postChainedSpins(loop, count: 1, milliseconds: 150)
        loop.run(for: .milliseconds(400))
        let started = ContinuousClock.now
        monitor.stop()
        let took = ContinuousClock.now - started
        #expect(took < .seconds(8), "stop() took \(took)")
        #expect(monitor.statistics.stallsDetected == 1)
        let errors = logs.entries.filter { $0.level == .error }.map { "\($0.message)" }
        #expect(errors.contains { $0.contains("report writer, which is blocked") }, "\(errors)")
    }
}
