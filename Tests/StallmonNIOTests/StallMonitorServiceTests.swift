import Dispatch
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
        let monitor = try NIOStallMonitor(group: group, configuration: .init(
            detection: .init(threshold: .milliseconds(60)), reports: .init(directory: directory)))
        let services = ServiceGroup(services: [StallMonitorService(monitor)], gracefulShutdownSignals: [],
                                    cancellationSignals: [], logger: Logger(label: "test"))
        let running = Task { try await services.run() }
        // A blocked stall that lasts until the group has shut down, so it is in progress at shutdown however slowly
        // a loaded machine runs this test (and it leaves the CPUs to the tests beside it).
        let release = DispatchSemaphore(value: 0)
        let stall = group.next().submit { waitInTask(for: release) }
        let detected = try await offThePool {
            eventually(timeout: .seconds(30)) {
                ((try? String(contentsOfFile: directory + "/events.jsonl", encoding: .utf8)) ?? "")
                    .contains("stall.begin")
            }
        }
        #expect(detected, "the stall was detected while the service ran")
        await services.triggerGracefulShutdown()
        try await running.value
        release.signal()
        let reports = readReports(directory)
        #expect(reports.count == 1)
        #expect(reports.first?.ongoing == true)
        #expect(reports.first?.phase == "tasks")
        try await stall.get()
        // Stopped: a second monitor of the same group is accepted.
        try NIOStallMonitor(group: group, configuration: .init(reports: .init(directory: directory))).stop()
        try await group.shutdownGracefully()
    }
}

@inline(never)
func waitInTask(for release: DispatchSemaphore) {
    release.wait()
}
