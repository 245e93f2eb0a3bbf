import Foundation
import Logging
import ServiceLifecycle
import Stallmon
import StallmonLifecycle
import StallmonLoop
import StallmonReport
import StallmonTestSupport
import Testing

/// StallmonLifecycle without NIO: a `Looper`'s monitor run by `StallMonitorService` in a `ServiceGroup`. (The NIO
/// monitor's run is tested in StallmonNIOTests.)
struct StallMonitorServiceTests {
    /// The service starts the monitor; at graceful shutdown it stops it, and the stall in progress is written as
    /// ongoing; `run()` returns.
    @Test func aLooperMonitorRunsAsAServiceAndItsStallInProgressIsWrittenAtShutdown() async throws {
        let directory = makeTemporaryDirectory()
        let loop = try Looper(name: "lifecycle-loop")
        let monitor = try LooperStallMonitor(loop: loop, configuration: .init(threshold: .milliseconds(60),
                                                                              reportDirectory: directory))
        let loopThread = Thread { loop.run() }
        loopThread.start()
        let services = ServiceGroup(services: [StallMonitorService(monitor)], gracefulShutdownSignals: [],
                                    cancellationSignals: [], logger: Logger(label: "test"))
        let running = Task { try await services.run() }
        // Started by the service: the probe counts the loop's iterations.
        let counting = try await offThePool {
            eventually(timeout: .seconds(30)) {
                loop.perform(label: "tick") {}
                return monitor.statistics.loop.iterations > 0
            }
        }
        #expect(counting, "the service started the monitor")
        // A blocked stall that lasts until the group has shut down, so it is in progress at shutdown.
        let release = DispatchSemaphore(value: 0)
        loop.perform(label: "held") { release.wait() }
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
        loop.stop()
        let reports = readReports(directory).filter { $0.label == "held" }
        #expect(reports.count == 1, "\(reports.map(\.label))")
        #expect(reports.first?.ongoing == true, "written as ongoing when the service stopped the monitor")
    }
}
