#if Lifecycle
import Foundation
import Logging
import ServiceLifecycle
import Stallmon

/// Something that watches loops and can be started and stopped: `LooperStallMonitor`, `ConcurrencyStallMonitor`
/// and StallmonNIO's `NIOStallMonitor`.
public protocol StallMonitoring: Sendable {
    /// Starts watching.
    func start()
    /// Stops watching; blocks while it joins the monitor's threads and flushes its reports.
    func stop()
}

extension LooperStallMonitor: StallMonitoring {}
extension ConcurrencyStallMonitor: StallMonitoring {}

/// Runs stall monitors as a swift-service-lifecycle `Service`: `run()` starts them and, once what they watch has shut
/// down, stops them: a stall in progress is written as ongoing, the reports are flushed (up to 5 s) and the sinks
/// (StallmonUpload's uploader) get up to 2 s to send what is pending.
///
/// The monitors must outlive the application's drain, or a stall during it is cut short (written as ongoing) and
/// the rest of the drain is unwatched. A `ServiceGroup` shuts its services down in **reverse** order, each after the
/// one after it has finished. The robust wiring is to hand the application's services to this service, which runs
/// them as a `ServiceGroup` of their own (nested: the outer group's graceful shutdown reaches them, they shut down in
/// reverse order, and one that returns early or throws ends them all, as in any group) and stops the monitors only
/// after that group returned:
///
/// ```swift
/// let monitor = try ConcurrencyStallMonitor()
/// let group = ServiceGroup(services: [StallMonitorService(monitor, watching: [app])],
///                          gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
/// try await group.run()
/// ```
///
/// Without `watching:`, `run()` returns at graceful shutdown: list it **first** in the group (before the
/// application's services), so that it is shut down last.
public struct StallMonitorService: Service {
    private let monitors: [any StallMonitoring]
    private let services: [any Service]
    private let logger: Logger

    /// Wraps `monitor`, which `run()` starts and stops; `services` (the application's) run as a nested
    /// `ServiceGroup` (logging to `logger`) and the monitor stops after it returned.
    public init(_ monitor: any StallMonitoring, watching services: [any Service] = [],
                logger: Logger = Logger(label: "stallmon.watched-services")) {
        self.init([monitor], watching: services, logger: logger)
    }

    /// Wraps several monitors (e.g. a `NIOStallMonitor` and a `ConcurrencyStallMonitor`), started in this order and
    /// stopped in the reverse order; `services` run as a nested `ServiceGroup`, as above.
    public init(_ monitors: [any StallMonitoring], watching services: [any Service] = [],
                logger: Logger = Logger(label: "stallmon.watched-services")) {
        self.monitors = monitors
        self.services = services
        self.logger = logger
    }

    public func run() async throws {
        for monitor in monitors { monitor.start() }
        var failure: (any Error)?
        if services.isEmpty {
            // Returns at graceful shutdown; throws CancellationError when cancelled. Either way the monitors stop.
            try? await gracefulShutdown()
        } else {
            // A nested group listens to this task's graceful shutdown and cancellation, and shuts its services down
            // as any group does; the monitors keep watching until it returned.
            do {
                try await ServiceGroup(services: services, logger: logger).run()
            } catch {
                failure = error
            }
        }
        let monitors = monitors
        // stop() joins threads: never on the cooperative pool, which it could starve.
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            let thread = Thread {
                for monitor in monitors.reversed() { monitor.stop() }
                done.resume()
            }
            thread.name = "stallmon-stop"
            thread.start()
        }
        if let failure { throw failure }
    }
}
#endif
