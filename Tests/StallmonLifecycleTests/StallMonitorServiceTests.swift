import Foundation
import Logging
import ServiceLifecycle
import Stallmon
import StallmonLifecycle
import StallmonLoop
import StallmonReport
import StallmonTestSupport
import Testing

/// `StallMonitorService` without SwiftNIO: a `LooperStallMonitor` run by a `ServiceGroup`. (With NIO, and in a real
/// Hummingbird 2 service, in StallmonNIOTests and HummingbirdServiceTests.)
@Suite(.serialized)
struct StallMonitorServiceTests {
    /// A loop on a thread of its own, watched by a monitor writing to a new directory; the loop stops with `close`.
    struct WatchedLoop: Sendable {
        let loop: Looper
        let monitor: LooperStallMonitor
        let directory: String

        init(_ name: String = #function) throws {
            directory = makeTemporaryDirectory(name)
            loop = try Looper(name: "lifecycle")
            monitor = try LooperStallMonitor(loop: loop, configuration: .init(
                detection: .init(threshold: .milliseconds(100)), reports: .init(directory: directory)))
            let loop = loop
            Thread { loop.run() }.start()
        }

        /// Runs `milliseconds` of CPU work on the loop, labelled `label`, and, when `untilDetected`, more until the
        /// monitor detected the stall (however late a loaded machine runs the watchdog); returns once that iteration
        /// has ended (a block posted from a block runs in the loop's next pass).
        func stall(milliseconds: Int, label: LooperLabel, untilDetected: Bool = false) async {
            let loop = loop
            let monitor = monitor
            let detected: (@Sendable () -> Int)? = untilDetected ? { @Sendable in monitor.statistics.stallsDetected } : nil
            await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
                loop.perform(label: label) {
                    spinUntilDetected(milliseconds: milliseconds, detected: detected)
                    loop.perform { done.resume() }
                }
            }
        }

        /// Waits (off the cooperative pool) until the monitor measures the loop's iterations: it has started, and
        /// the loop has taken its probe.
        func waitUntilWatched() async throws -> Bool {
            let (loop, monitor) = (loop, monitor)
            return try await offThePool {
                eventually(timeout: .seconds(30)) {
                    loop.perform {}
                    return monitor.statistics.loop.iterations > 0
                }
            }
        }

        /// The reports, once `count` are written (the writer may still be at work when `run()` returns).
        func reports(count: Int) async throws -> [StallReport] {
            let directory = directory
            return try await offThePool {
                _ = eventually(timeout: .seconds(30)) { readReports(directory).count >= count }
                return readReports(directory).sorted { $0.start.monotonicNs < $1.start.monotonicNs }
            }
        }

        func close() {
            loop.stop()
        }
    }

    /// An application's service that stalls the loop as it serves (when `servingMilliseconds` is set) and in its
    /// graceful shutdown (its drain), then returns or throws.
    struct DrainingService: Service {
        let watched: WatchedLoop
        var servingMilliseconds: Int?
        let drainMilliseconds: Int
        var fails = false

        func run() async throws {
            if let servingMilliseconds {
                await watched.stall(milliseconds: servingMilliseconds, label: "serving", untilDetected: true)
            }
            try? await gracefulShutdown()
            await watched.stall(milliseconds: drainMilliseconds, label: "drain", untilDetected: true)
            if fails { throw DrainFailed() }
        }
    }

    struct DrainFailed: Error {}

    static func group(_ service: StallMonitorService) -> ServiceGroup {
        ServiceGroup(services: [service], gracefulShutdownSignals: [], cancellationSignals: [],
                     logger: Logger(label: "test"))
    }

    @Test("with watching: the monitor outlives the application's drain, whose stall is reported whole")
    func theDrainIsWatchedToItsEnd() async throws {
        let watched = try WatchedLoop()
        defer { watched.close() }
        let group = Self.group(StallMonitorService(
            watched.monitor,
            watching: [DrainingService(watched: watched, servingMilliseconds: 150, drainMilliseconds: 300)]))
        let running = Task { try await group.run() }
        // The application's services run once the monitor has started: their stall as they serve is seen.
        #expect(try await watched.reports(count: 1).map(\.label) == ["serving"])
        await group.triggerGracefulShutdown()
        try await running.value
        let reports = try await watched.reports(count: 2)
        #expect(reports.map(\.label) == ["serving", "drain"], "\(reports.map { ($0.label, $0.ongoing) })")
        let drain = try #require(reports.last)
        #expect(!drain.ongoing, "the drain's stall ended before the monitor stopped")
        #expect(drain.durationSource == "loop" && drain.durationMs + (drain.frozenMs ?? 0) >= 300,
                "\(drain.durationMs) ms")
        // Stopped when run() returned: a stall now is not seen (a running watchdog would see it before it ends).
        let detected = watched.monitor.statistics.stallsDetected
        await watched.stall(milliseconds: 150, label: "after")
        #expect(watched.monitor.statistics.stallsDetected == detected)
    }

    @Test("with watching: a service that throws ends the group; the monitor still stops, after its drain")
    func aFailingServiceStillStopsTheMonitor() async throws {
        let watched = try WatchedLoop()
        defer { watched.close() }
        let group = Self.group(StallMonitorService(
            watched.monitor, watching: [DrainingService(watched: watched, drainMilliseconds: 200, fails: true)]))
        let running = Task { try await group.run() }
        await group.triggerGracefulShutdown()
        await #expect(throws: DrainFailed.self) { try await running.value }
        let reports = try await watched.reports(count: 1)
        #expect(reports.map(\.label) == ["drain"] && reports.allSatisfy { !$0.ongoing },
                "\(reports.map { ($0.label, $0.ongoing) })")
        let detected = watched.monitor.statistics.stallsDetected
        await watched.stall(milliseconds: 150, label: "after")
        #expect(watched.monitor.statistics.stallsDetected == detected, "stopped when run() returned")
    }

    @Test("without watching: run() returns at graceful shutdown, the stall in progress written as ongoing")
    func withoutWatchingAStallInProgressIsOngoing() async throws {
        let watched = try WatchedLoop()
        defer { watched.close() }
        let group = Self.group(StallMonitorService(watched.monitor))
        let running = Task { try await group.run() }
        #expect(try await watched.waitUntilWatched(), "the monitor started")
        // A stall that lasts until the group has shut down, however slowly a loaded machine runs this test.
        let release = DispatchSemaphore(value: 0)
        defer { release.signal() }
        watched.loop.perform(label: "held") { release.wait() }
        let directory = watched.directory
        let detected = try await offThePool {
            eventually(timeout: .seconds(30)) {
                ((try? String(contentsOfFile: directory + "/events.jsonl", encoding: .utf8)) ?? "")
                    .contains("stall.begin")
            }
        }
        #expect(detected, "the stall was detected while the service ran")
        await group.triggerGracefulShutdown()
        try await running.value
        let reports = try await watched.reports(count: 1)
        #expect(reports.count == 1)
        #expect(reports.first?.ongoing == true && reports.first?.label == "held")
    }
}
