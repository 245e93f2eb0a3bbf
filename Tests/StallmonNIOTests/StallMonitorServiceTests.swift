import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import Stallmon
import StallmonNIO
import StallmonReport
import StallmonTestSupport
import Testing

struct StallMonitorServiceTests {
    /// A ServiceGroup runs the monitor; a stall in progress at graceful shutdown is written as ongoing, and `run()`
    /// returns, having stopped the monitor, without the group's tasks hanging.
    @Test func gracefulShutdownStopsTheMonitorAndWritesTheStallInProgress() async throws {
        let directory = makeTemporaryDirectory()
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let monitor = try NIOStallMonitor(group: group, configuration: .init(threshold: .milliseconds(60),
                                                                             reportDirectory: directory))
        let services = ServiceGroup(services: [StallMonitorService(monitor)], gracefulShutdownSignals: [],
                                    cancellationSignals: [], logger: Logger(label: "test"))
        let running = Task { try await services.run() }
        try await Task.sleep(for: .milliseconds(100))
        let stall = group.next().submit { _ = stallInExecutedTask(milliseconds: 3000) }
        // Shut down once the stall has been detected (the event log says so), however loaded the machine is.
        for _ in 0..<200 where !((try? String(contentsOfFile: directory + "/events.jsonl", encoding: .utf8)) ?? "")
            .contains("stall.begin") {
            try await Task.sleep(for: .milliseconds(10))
        }
        await services.triggerGracefulShutdown()
        try await running.value
        let reports = readReports(directory)
        #expect(reports.count == 1)
        #expect(reports.first?.ongoing == true)
        #expect(reports.first?.phase == "tasks")
        try await stall.get()
        // Stopped: a second monitor of the same group is accepted.
        try NIOStallMonitor(group: group, configuration: .init(reportDirectory: directory)).stop()
        try await group.shutdownGracefully()
    }
}
