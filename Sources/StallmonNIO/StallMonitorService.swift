#if NIO
import Foundation
import ServiceLifecycle
import Stallmon

/// Something that watches loops and can be started and stopped: `NIOStallMonitor`, `StallMonitor` and
/// `ConcurrencyStallMonitor`.
public protocol StallMonitoring: Sendable {
    /// Starts watching.
    func start()
    /// Stops watching; blocks while it joins the monitor's threads and flushes its reports.
    func stop()
}

extension NIOStallMonitor: StallMonitoring {}
extension StallMonitor: StallMonitoring {}
extension ConcurrencyStallMonitor: StallMonitoring {}

/// Runs a stall monitor as a swift-service-lifecycle `Service`: `run()` starts it and returns after graceful
/// shutdown (or cancellation), having stopped it: a stall in progress is written as ongoing, the reports are
/// flushed and the sinks (StallmonUpload's uploader) get up to 2 s to send what is pending.
///
/// Put it in the `ServiceGroup` **after** the application's services: a group shuts services down in reverse order,
/// so the monitor is still watching while the application drains.
///
/// ```swift
/// let monitor = try NIOStallMonitor(group: MultiThreadedEventLoopGroup.singleton)
/// let group = ServiceGroup(services: [app, StallMonitorService(monitor)], logger: logger)
/// try await group.run()
/// ```
public struct StallMonitorService: Service {
    private let monitor: any StallMonitoring

    /// Wraps `monitor`, which `run()` starts and stops.
    public init(_ monitor: any StallMonitoring) {
        self.monitor = monitor
    }

    public func run() async throws {
        monitor.start()
        // Returns at graceful shutdown; throws CancellationError when cancelled. Either way the monitor stops.
        try? await gracefulShutdown()
        let monitor = monitor
        // stop() joins threads: never on the cooperative pool, which it could starve.
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            let thread = Thread {
                monitor.stop()
                done.resume()
            }
            thread.name = "stallmon-stop"
            thread.start()
        }
    }
}
#endif
