import ArgumentParser
import Foundation
import Logging
import Stallmon
import StallmonReport
import StallmonUpload
import StallmonLoop
import Synchronization

/// `stallmon demo`: a sample service on a monitored loop that stalls for real, writing real reports.
struct DemoCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Run a sample service with real stalls and write their reports.",
        discussion: """
            The service runs on a monitored Looper: a heartbeat timer, a TCP echo server on 127.0.0.1 with a \
            client thread pinging it, and work posted from another thread. Every 1.5 s it stalls its loop in a \
            named function: CPU-bound work (crunchPrimes), a blocking sleep (sleepOnTheLoop), a blocking read \
            (readFromSlowPeer), a lock held by another thread (waitForContendedLock), and a large JSON encode \
            (encodeLargeJSON). Prints where the reports and the event log are, then a summary.

            Follow it live from another terminal with `stallmon tail --follow DIR/events.jsonl`.
            """)

    @Option(help: "How long to run, in seconds.")
    var seconds: Double = 10

    @Option(help: "Where to write reports and the event log.")
    var reportDir: String = "./stallmon-demo"

    @Option(help: "Stall threshold in milliseconds.")
    var thresholdMs: Double = 100

    @Option(help: "Which stalls to inject, in rotation: all, none, or a comma list of cpu, sleep, read, lock, json, async, hang (a loop that never comes back; not in all).")
    var stalls: String = "all"

    @Option(help: "Keep the loop busy with back-to-back chunks of this many ms of CPU work (0: off): load that must not be reported.")
    var busyMs: Int = 0

    @OptionGroup var config: ConfigOptions

    func validate() throws {
        guard seconds > 0, seconds <= 3600 else { throw ValidationError("--seconds must be in (0, 3600]") }
        // NaN fails the comparison; the bound keeps the stalls (2.5 thresholds) within a run of at most an hour.
        guard thresholdMs > 0, thresholdMs <= 600_000 else {
            throw ValidationError("--threshold-ms must be greater than 0 and at most 600000 (got \(thresholdMs))")
        }
        _ = try DemoService.StallKind.parse(stalls)
        guard busyMs >= 0, Double(busyMs) < thresholdMs else {
            throw ValidationError("--busy-ms must be between 0 and the threshold (got \(busyMs))")
        }
    }

    func run() throws {
        let configuration = try demoConfiguration()
        var logger = Logger(label: "stallmon.demo")
        logger.logLevel = .notice
        let loop = try Looper(name: "demo-main")
        // SIGTERM or SIGINT stop the loop, then the monitors: a stall in progress ends first and is reported whole
        // (the CLI blocked both before any thread started, so only this signalfd sees them).
        try loop.addSignalHandler(for: [SIGTERM, SIGINT]) { signal in
            print("stallmon demo: signal \(signal), stopping")
            loop.stop()
        }
        let (monitor, asyncMonitor) = try makeMonitors(loop: loop, configuration: configuration, logger: logger)
        let service = try DemoService(loop: loop, stallEvery: .milliseconds(1500),
                                      stallLength: max(Int(thresholdMs * 2.5), 150),
                                      kinds: try DemoService.StallKind.parse(stalls), busyMs: busyMs)
        print("stallmon demo: running for \(seconds) s on loop \"\(loop.name)\" (threshold \(ms(thresholdMs)))")
        print("  reports:   \(configuration.reports.directory)/stall-*.json")
        print("  event log: \(configuration.reports.resolvedEventLogPath)   (stallmon tail --follow \(configuration.reports.resolvedEventLogPath))")
        print("  echo server on 127.0.0.1:\(service.port)")
        monitor.start()
        asyncMonitor?.start()
        service.start()
        loop.run(for: .nanoseconds(Int64(seconds * 1e9)))
        service.stop()
        asyncMonitor?.stop()
        monitor.stop()

        let stalls = printSummary(service: service, monitor: monitor, asyncMonitor: asyncMonitor)
        try printReports(in: configuration.reports.directory)
        if stalls == 0 && service.stallsInjected.load(ordering: .relaxed) > 0 { throw ExitCode(1) }
    }

    /// The configuration (file and environment) with the demo's options over it: its report directory, no event log
    /// elsewhere, its threshold, and sampling and interim reports scaled to it.
    private func demoConfiguration() throws -> StallMonitorConfiguration {
        var configuration = try config.load()
        configuration.reports.directory = reportDir
        configuration.reports.eventLogPath = nil
        configuration.detection.threshold = .nanoseconds(Int64(thresholdMs * 1_000_000))
        if configuration.detection.sampleInterval >= configuration.detection.threshold {
            configuration.detection.sampleInterval = configuration.detection.threshold / 4
        }
        if configuration.detection.interimAfter <= configuration.detection.threshold {
            configuration.detection.interimAfter = configuration.detection.threshold * 4
        }
        do {
            try configuration.validate()
        } catch {
            throw ValidationError(error.description)
        }
        return configuration
    }

    /// The loop's monitor and, when the rotation has the async stall, the global executor's.
    private func makeMonitors(loop: Looper, configuration: StallMonitorConfiguration, logger: Logger) throws
        -> (LooperStallMonitor, ConcurrencyStallMonitor?) {
        do {
            // Spooling and upload are StallmonUpload's sink, linked when the configuration asks for them.
            let sinks: [any StallReportSink] = configuration.upload.spoolEnabled
                ? [try UploadSink(configuration: configuration, logger: logger)] : []
            let monitor = try LooperStallMonitor(loop: loop, configuration: configuration, logger: logger,
                                                 sinks: sinks)
            // Before any task runs, when the rotation has the async stall: its task is timed on the global
            // executor (no async main here, so the main actor is left alone).
            let asyncMonitor = try DemoService.StallKind.parse(stalls).contains(.async)
                ? ConcurrencyStallMonitor(configuration: configuration, logger: logger, sinks: sinks, mainActor: false)
                : nil
            return (monitor, asyncMonitor)
        } catch let error as ConfigurationError {
            throw ValidationError(error.description)
        } catch let error as StallMonitorError {
            warn(error.description)
            throw ExitCode(1)
        }
    }

    /// What the service did and the monitors counted, the shape of every iteration included. Returns the stalls
    /// detected.
    private func printSummary(service: DemoService, monitor: LooperStallMonitor,
                              asyncMonitor: ConcurrencyStallMonitor?) -> Int {
        let statistics = monitor.statistics
        print("")
        print("Service: \(service.heartbeats.load(ordering: .relaxed)) heartbeats, "
            + "\(service.postedBlocks.load(ordering: .relaxed)) posted blocks, "
            + "\(service.client.roundTrips.load(ordering: .relaxed)) echo round trips "
            + "(worst \(ms(Double(service.client.worstRoundTripMicroseconds.load(ordering: .relaxed)) / 1000))), "
            + "\(service.stallsInjected.load(ordering: .relaxed)) stalls injected")
        print("Monitor: \(statistics.stallsDetected) stalls detected, \(statistics.reportsWritten) reports written, "
            + "\(statistics.reportsDropped) dropped, \(statistics.samplesCaptured) stack samples")
        let asyncStalls = asyncMonitor?.statistics.stallsDetected ?? 0
        if let asyncMonitor {
            print("Async:   \(asyncStalls) stalls detected, \(asyncMonitor.statistics.reportsWritten) reports written "
                + "on \(asyncMonitor.name) (\(ConcurrencyStallMonitor.jobsTimed) jobs timed)")
        }
        let loopFigures = statistics.loop
        let busy = { (fraction: Double) in
            loopFigures.busyHistogram.percentile(fraction).map { value -> String in
                let milliseconds = Double(value.nanosecondsClamped) / 1e6
                return milliseconds < 1 ? String(format: "%.0f µs", milliseconds * 1000) : ms(milliseconds)
            } ?? "-"
        }
        print("Loop:    \(loopFigures.iterations) iterations, busy p50 \(busy(0.5)), p99 \(busy(0.99)), "
            + "max \(busy(1)); utilization \(String(format: "%.1f", loopFigures.utilization * 100)) %")
        print("")
        return statistics.stallsDetected + asyncStalls
    }

    /// This run's reports, each with its duration and top frame.
    private func printReports(in directory: String) throws {
        let scan = try ReportReader.scan(directory: directory)
        let ours = scan.reports.filter { $0.report.process.pid == getpid() }
        for (path, report) in ours {
            let top = report.topFrame?.displayName ?? StallSummary.noInAppFrame
            print("  \(ms(report.durationMs).padding(toLength: 9, withPad: " ", startingAt: 0)) \(top)")
            print("            \(path)")
        }
        print("\nNext: stallmon report \(directory)   |   stallmon show <report>")
    }
}

/// The sample service.
final class DemoService: Sendable {
    let loop: Looper
    let echo: EchoServer
    let client = EchoClient()
    let heartbeats = Atomic<Int>(0)
    let postedBlocks = Atomic<Int>(0)
    let stallsInjected = Atomic<Int>(0)
    private let producerStopping = Atomic<Bool>(false)
    private let timers = Mutex<[LooperTimer]>([])
    private let lock = ContendedLock()
    private let stallEvery: Duration
    private let stallLength: Int
    private let kinds: [StallKind]
    private let busyMs: Int

    /// The injected stalls, in rotation order.
    enum StallKind: String, CaseIterable {
        case cpu, sleep, read, lock, json, async
        /// The loop never comes back (for `hang_action` and systemd's watchdog); not part of `all`.
        case hang

        static func parse(_ text: String) throws -> [StallKind] {
            switch text.lowercased() {
            case "all": return allCases.filter { $0 != .hang }
            case "none", "": return []
            default:
                return try text.split(separator: ",").map { name in
                    guard let kind = StallKind(rawValue: name.trimmingCharacters(in: .whitespaces).lowercased()) else {
                        throw ValidationError(
                            "unknown stall kind \(name) (cpu, sleep, read, lock, json, async, hang, all, none)")
                    }
                    return kind
                }
            }
        }
    }

    var port: UInt16 { echo.port }

    init(loop: Looper, stallEvery: Duration, stallLength: Int, kinds: [StallKind], busyMs: Int) throws {
        self.loop = loop
        self.stallEvery = stallEvery
        self.stallLength = stallLength
        self.kinds = kinds
        self.busyMs = busyMs
        echo = try EchoServer(loop: loop)
    }

    func start() {
        let heartbeat = loop.schedule(every: .milliseconds(50), tolerance: .milliseconds(5), label: "heartbeat") {
            [self] in
            heartbeats.wrappingAdd(1, ordering: .relaxed)
        }
        var started = [heartbeat]
        if !kinds.isEmpty {
            started.append(loop.schedule(every: stallEvery, initialDelay: .milliseconds(500), label: "stall.injector") {
                [self] in injectNextStall()
            })
        }
        timers.withLock { $0 = started }
        if busyMs > 0 { keepBusy() }
        client.start(port: echo.port)
        Thread.detachNewThread { [self] in
            while !producerStopping.load(ordering: .relaxed) {
                loop.perform(label: "work.posted") { [self] in
                    postedBlocks.wrappingAdd(1, ordering: .relaxed)
                }
                usleep(20_000)
            }
        }
    }

    func stop() {
        producerStopping.store(true, ordering: .relaxed)
        for timer in timers.withLock({ $0 }) { timer.cancel() }
        client.stop()
        echo.shutdown()
    }

    /// Back-to-back short chunks of CPU work, each its own pass: a busy but healthy loop.
    private func keepBusy() {
        guard !producerStopping.load(ordering: .relaxed) else { return }
        loop.perform(label: "work.busy") { [self] in
            _ = DemoStalls.crunchPrimes(milliseconds: busyMs)
            keepBusy()
        }
    }

    private func injectNextStall() {
        let index = stallsInjected.wrappingAdd(1, ordering: .relaxed).oldValue
        switch kinds[index % kinds.count] {
        case .cpu: _ = DemoStalls.crunchPrimes(milliseconds: stallLength)
        case .sleep: DemoStalls.sleepOnTheLoop(milliseconds: stallLength)
        case .read: _ = DemoStalls.readFromSlowPeer(milliseconds: stallLength)
        case .lock: DemoStalls.waitForContendedLock(lock, milliseconds: stallLength)
        case .json: _ = DemoStalls.encodeLargeJSON(milliseconds: stallLength)
        case .async: DemoStalls.blockAWorkerInATask(milliseconds: stallLength)  // the loop goes on
        case .hang: DemoStalls.hangForever()
        }
    }
}
