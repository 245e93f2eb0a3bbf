import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Stallmon
import StallmonNIO
import StallmonReport
import Synchronization

/// 7. SwiftNIO event loops: what StallmonNIO costs a NIOHTTP1 server under wrk (plain NIO beside NIO with the
/// monitor, alternating, in one run), and how well it finds stalls in both phases of a tick beside a heartbeat
/// probe (a no-op `execute` every 10 ms, the method swift-nio#2410 sketches).
struct NIOEventLoops {
    let quick: Bool
    let scratch: String
    let logger: Logger

    func run(_ results: Results) throws {
        try throughput(results)
        try detection(results)
    }

    // MARK: wrk

    private func throughput(_ results: Results) throws {
        guard let wrk = findExecutable("wrk") else {
            print("\n7a. NIOHTTP1 under wrk: skipped (wrk not installed; scripts/bench.sh installs it)")
            return
        }
        let seconds = quick ? 3 : 8
        let rounds = quick ? 1 : 3
        print("\n7a. NIOHTTP1 hello world under wrk (1 loop thread, 1 wrk thread, 32 connections, \(seconds) s × "
            + "\(rounds) alternating rounds)")
        let (plain, monitored) = try Self.alternatingWrkRounds(wrk: wrk, rounds: rounds, seconds: seconds, path: "/") {
            withMonitor in
            let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
            var monitor: NIOStallMonitor?
            if withMonitor {
                monitor = try NIOStallMonitor(group: group, configuration: .init(
                    detection: .init(threshold: .milliseconds(100)), reports: .init(directory: scratch + "/wrk")), logger: logger)
                monitor?.start()
            }
            let server = try BenchHTTPServer(group: group, injected: nil)
            return (server.port, {
                try server.close()
                monitor?.stop()
                try? group.syncShutdownGracefully()
            })
        }
        let plainRPS = Stats.median(plain.map(\.rps))
        let monitoredRPS = Stats.median(monitored.map(\.rps))
        let plainP99 = Stats.median(plain.map(\.p99))
        let monitoredP99 = Stats.median(monitored.map(\.p99))
        results.add(Figure(section: "nio", name: "plain NIO: requests/s (median of rounds)", value: plainRPS,
                           unit: "req/s"))
        results.add(Figure(section: "nio", name: "with StallmonNIO: requests/s", value: monitoredRPS, unit: "req/s"))
        results.add(Figure(section: "nio", name: "throughput with / without", value: monitoredRPS / plainRPS,
                           unit: "×", target: "≥ 0.99×"))
        results.add(Figure(section: "nio", name: "plain NIO: latency p99", value: plainP99, unit: "ms"))
        results.add(Figure(section: "nio", name: "with StallmonNIO: latency p99", value: monitoredP99, unit: "ms"))
        results.add(Figure(section: "nio", name: "p99 latency with / without", value: monitoredP99 / plainP99,
                           unit: "×", target: "≤ 1.01×"))
    }

    /// Requests/sec and the 99th latency percentile (ms) from `wrk --latency`.
    /// `rounds` pairs of wrk runs (1 thread, 32 connections, `seconds` s) against `path` of a server `serve` starts
    /// for each run, plain and monitored alternately (`serve(withMonitor)` returns its port and how to stop it).
    /// A run whose output cannot be read is said and left out.
    static func alternatingWrkRounds(
        wrk: String, rounds: Int, seconds: Int, path: String,
        serve: (_ withMonitor: Bool) throws -> (port: Int, stop: () throws -> Void)
    ) throws -> (plain: [(rps: Double, p99: Double)], monitored: [(rps: Double, p99: Double)]) {
        var plain: [(rps: Double, p99: Double)] = []
        var monitored: [(rps: Double, p99: Double)] = []
        for round in 0..<(rounds * 2) {
            let withMonitor = round % 2 == 1
            let (port, stop) = try serve(withMonitor)
            let output: String
            do {
                output = try runCapturing(wrk, ["-t1", "-c32", "-d\(seconds)s", "--latency",
                                                "http://127.0.0.1:\(port)\(path)"])
            } catch {
                try? stop()
                throw error
            }
            try stop()
            guard let parsed = parseWrk(output) else {
                print("   could not read wrk's output:\n\(output)")
                continue
            }
            if withMonitor { monitored.append(parsed) } else { plain.append(parsed) }
        }
        return (plain, monitored)
    }

    static func parseWrk(_ output: String) -> (rps: Double, p99: Double)? {
        var rps: Double?
        var p99: Double?
        for line in output.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            if fields.first == "Requests/sec:", fields.count > 1 { rps = Double(fields[1]) }
            if fields.first == "99%", fields.count > 1 { p99 = milliseconds(String(fields[1])) }
        }
        guard let rps, let p99 else { return nil }
        return (rps, p99)
    }

    private static func milliseconds(_ text: String) -> Double? {
        for (suffix, factor) in [("us", 0.001), ("ms", 1.0), ("s", 1000.0)] where text.hasSuffix(suffix) {
            return Double(text.dropLast(suffix.count)).map { $0 * factor }
        }
        return nil
    }

    // MARK: detection

    private func detection(_ results: Results) throws {
        let count = quick ? 60 : 200
        let threshold = DetectionQuality.thresholdMs
        print("\n7b. NIO detection quality: \(count) injected stalls, half in channelRead (I/O phase), half in "
            + "execute (task phase), threshold \(Int(threshold)) ms, about half just under it")
        var generator = SplitMix(seed: 0x51_0e)
        let durations = (0..<count).map { index -> Double in
            (index / 2) % 2 == 0 ? threshold * generator.uniform(0.6, 0.97) : threshold * generator.uniform(1.03, 2.5)
        }
        let quality = DetectionQuality(quick: quick, scratch: scratch, logger: logger)
        for monitored in [true, false] {
            let outcome = try workload(durations, monitored: monitored)
            let scored = quality.score(outcome.injected, outcome.detections)
            let name = monitored ? "StallmonNIO" : "baseline: heartbeat probe"
            results.add(Figure(section: "nio", name: "\(name) recall", value: scored.recall * 100, unit: "%",
                               target: monitored ? "≥ 99 %" : nil))
            results.add(Figure(section: "nio", name: "\(name) precision", value: scored.precision * 100, unit: "%",
                               target: monitored ? "≥ 99 %" : nil))
            results.add(Figure(section: "nio", name: "\(name) delay after crossing, p99",
                               value: Stats.percentile(scored.delays, 0.99), unit: "ms",
                               target: monitored ? "≤ 10 ms" : nil))
            results.add(Figure(section: "nio", name: "\(name) duration error, median",
                               value: Stats.median(scored.errors), unit: "ms"))
            results.add(Figure(section: "nio", name: "\(name) duration error, p99",
                               value: Stats.percentile(scored.errors, 0.99), unit: "ms",
                               target: monitored ? "≤ 1 ms" : nil))
            if monitored {
                results.add(Figure(section: "nio", name: "StallmonNIO reports with the right phase",
                                   value: outcome.phasesRight * 100, unit: "%"))
            }
        }
    }

    // MARK: 16 loops and the pool in one process

    /// 16 event loops and the pool monitored in one process (issue 42): detection on a loop picked in turn, the
    /// process's CPU while idle beside the same group unmonitored, and the watchdog threads that take it.
    func manyLoops(_ results: Results) throws {
        let loops = 16
        let count = quick ? 64 : 160
        let threshold = DetectionQuality.thresholdMs
        print("\n7c (section loops). \(loops) NIO loops and the pool in one process: \(count) injected stalls, each on the next loop, "
            + "threshold \(Int(threshold)) ms; idle CPU beside the same group unmonitored")
        var generator = SplitMix(seed: 0x16_10)
        let durations = (0..<count).map { index -> Double in
            index % 2 == 0 ? threshold * generator.uniform(0.6, 0.97) : threshold * generator.uniform(1.03, 2.5)
        }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: loops)
        defer { try? group.syncShutdownGracefully() }
        let unmonitoredIdle = idleCPU(seconds: quick ? 2 : 5).total
        let directory = scratch + "/nio-many-loops"
        var configuration = StallMonitorConfiguration(
            detection: .init(threshold: .milliseconds(Int(threshold)), sampleInterval: .milliseconds(10)), reports: .init(directory: directory))
        configuration.reports.maxReportsPerSignaturePerHour = 100_000
        let (monitor, pool) = try startMonitors(group, configuration)
        let monitoredIdle = idleCPU(seconds: quick ? 2 : 5)
        let watchdogs = Self.threads(named: ["stallmon-watch", "stallmon-pool"])
        let eventLoops = Array(group.makeIterator())
        var injected: [DetectionQuality.Injected] = []
        let busyStart = (threads: threadCPUByName(), at: nowNanoseconds())
        for (index, duration) in durations.enumerated() {
            usleep(35_000)
            injected.append(try eventLoops[index % loops].submit {
                let start = nowNanoseconds()
                _ = benchSpin(milliseconds: duration)
                return DetectionQuality.Injected(start: start, duration: nowNanoseconds() - start)
            }.wait())
        }
        usleep(100_000)
        let busy = Self.monitorThreadsShare(since: busyStart)
        monitor.stop()
        pool.stop()
        // The same group idle under monitors of the default threshold (100 ms): the watchdog looks half as often.
        var defaults = StallMonitorConfiguration(reports: .init(directory: directory + "-defaults"))
        defaults.reports.maxReportsPerSignaturePerHour = 100_000
        let (defaultMonitor, defaultPool) = try startMonitors(group, defaults)
        let defaultIdle = idleCPU(seconds: quick ? 2 : 5)
        defaultMonitor.stop()
        defaultPool.stop()
        // One loop and the pool, idle, the default threshold.
        let single = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        defer { try? single.syncShutdownGracefully() }
        let (singleMonitor, singlePool) = try startMonitors(single, defaults)
        let singleIdle = idleCPU(seconds: quick ? 2 : 5)
        singleMonitor.stop()
        singlePool.stop()
        // The floor, without stallmon: a bare thread that wakes as often as the idle watchdog (every 75 ms).
        let idlePoll: UInt64 = 75_000_000
        let bareWake = bareWakeCost(interval: idlePoll, freezeReading: false, seconds: quick ? 2 : 5)
        let bareWithReading = bareWakeCost(interval: idlePoll, freezeReading: true, seconds: quick ? 2 : 5)
        let reports = try ReportReader.scan(directory: directory).reports.map(\.report)
        let detections = reports.filter { $0.loop.hasPrefix("NIO-") }.map(DetectionQuality.Detection.init)
        let scored = DetectionQuality(quick: quick, scratch: scratch, logger: logger).score(injected, detections)
        results.add(Figure(section: "nio", name: "16 loops + pool: recall", value: scored.recall * 100, unit: "%",
                           target: "≥ 99 %"))
        results.add(Figure(section: "nio", name: "16 loops + pool: precision", value: scored.precision * 100,
                           unit: "%", target: "≥ 99 %"))
        results.add(Figure(section: "nio", name: "16 loops + pool: delay after crossing, p99",
                           value: Stats.percentile(scored.delays, 0.99), unit: "ms", target: "≤ 10 ms"))
        results.add(Figure(section: "nio", name: "16 loops + pool: duration error, p99",
                           value: Stats.percentile(scored.errors, 0.99), unit: "ms", target: "≤ 1 ms"))
        results.add(Figure(section: "nio", name: "16 loops + pool: watchdog threads", value: Double(watchdogs),
                           unit: "threads", target: "1"))
        results.add(Figure(section: "nio", name: "16 idle loops: process CPU unmonitored", value: unmonitoredIdle,
                           unit: "%"))
        results.add(Figure(section: "nio", name: "16 idle loops + pool: process CPU monitored",
                           value: monitoredIdle.total, unit: "%"))
        results.add(Figure(section: "nio", name: "… the same, default threshold (100 ms)", value: defaultIdle.total,
                           unit: "%", target: "≤ 0.1 %"))
        for (name, share) in defaultIdle.byThread.sorted(by: { $0.key < $1.key }) {
            results.add(Figure(section: "nio", name: "… of which thread \(name)", value: share, unit: "%"))
        }
        results.add(Figure(section: "nio", name: "1 idle loop + pool, default threshold: process CPU",
                           value: singleIdle.total, unit: "%"))
        for (name, share) in singleIdle.byThread.sorted(by: { $0.key < $1.key }) {
            results.add(Figure(section: "nio", name: "… of which thread \(name)", value: share, unit: "%"))
        }
        let wakesPerSecond = 1e9 / Double(idlePoll)
        results.add(Figure(section: "nio", name: "floor: a bare wake-up every 75 ms, CPU per wake", value: bareWake,
                           unit: "us"))
        results.add(Figure(section: "nio", name: "… as a share of a CPU", value: bareWake * wakesPerSecond / 1e4,
                           unit: "%"))
        results.add(Figure(section: "nio", name: "… with one freeze reading, CPU per wake", value: bareWithReading,
                           unit: "us"))
        results.add(Figure(section: "nio", name: "… as a share of a CPU", value: bareWithReading * wakesPerSecond / 1e4,
                           unit: "%"))
        for (name, share) in busy.sorted(by: { $0.key < $1.key }) {
            results.add(Figure(section: "nio", name: "16 loops, \(count) stalls reported: thread \(name)", value: share,
                               unit: "%"))
        }
    }

    /// The group's monitor and the pool's, started and given 200 ms to settle.
    private func startMonitors(_ group: MultiThreadedEventLoopGroup, _ configuration: StallMonitorConfiguration) throws
        -> (NIOStallMonitor, ConcurrencyStallMonitor) {
        let monitor = try NIOStallMonitor(group: group, configuration: configuration, logger: logger)
        let pool = try ConcurrencyStallMonitor(configuration: configuration, logger: logger, mainActor: false)
        monitor.start()
        pool.start()
        usleep(200_000)
        return (monitor, pool)
    }

    /// The whole process's CPU over `seconds` of doing nothing, in % of one CPU, and the share of the monitor's
    /// threads (named `stallmon-…`) by name.
    private func idleCPU(seconds: UInt32) -> (total: Double, byThread: [String: Double]) {
        let before = processCPUSeconds()
        let start = (threads: threadCPUByName(), at: nowNanoseconds())
        sleep(seconds)
        let wall = Double(nowNanoseconds() - start.at) / 1e9
        return ((processCPUSeconds() - before) / wall * 100, Self.monitorThreadsShare(since: start))
    }

    /// The CPU of each of the monitor's threads (named `stallmon-…`) since `start`, in % of one CPU.
    static func monitorThreadsShare(since start: (threads: [String: UInt64], at: UInt64)) -> [String: Double] {
        let wall = Double(nowNanoseconds() - start.at) / 1e9
        var byThread: [String: Double] = [:]
        // Thread names are cut at 15 characters; the bench's own main thread is `stallmon-bench`.
        for (name, after) in threadCPUByName() where name.hasPrefix("stallmon-") && name != "stallmon-bench" {
            byThread[name] = Double(after &- (start.threads[name] ?? 0)) / 1e9 / wall * 100
        }
        return byThread
    }

    /// How many threads of this process have one of `names` (their kernel name).
    static func threads(named names: Set<String>) -> Int {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.filter { task in
            let name = (try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8)) ?? ""
            return names.contains(name.trimmingCharacters(in: .whitespacesAndNewlines))
        }.count
    }

    private struct Outcome {
        var injected: [DetectionQuality.Injected]
        var detections: [DetectionQuality.Detection]
        var phasesRight: Double
    }

    private func workload(_ durations: [Double], monitored: Bool) throws -> Outcome {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        defer { try? group.syncShutdownGracefully() }
        let loop = group.next()
        let directory = scratch + "/nio-detection-\(monitored)"
        var configuration = StallMonitorConfiguration(
            detection: .init(threshold: .milliseconds(Int(DetectionQuality.thresholdMs)), sampleInterval: .milliseconds(10)), reports: .init(directory: directory))
        configuration.reports.maxReportsPerSignaturePerHour = 100_000
        let monitor = monitored ? try NIOStallMonitor(group: group, configuration: configuration, logger: logger) : nil
        monitor?.start()
        let injected = Mutex<[(DetectionQuality.Injected, phase: String)]>([])
        let server = try BenchHTTPServer(group: group, injected: { start, duration in
            injected.withLock { $0.append((.init(start: start, duration: duration), "io")) }
        })
        let probe = monitored ? nil : HeartbeatProbe(post: { loop.execute($0) },
                                                     everyMs: DetectionQuality.heartbeatMs,
                                                     thresholdMs: DetectionQuality.thresholdMs)
        probe?.start()
        let client = BenchHTTPClient(port: server.port)
        for (index, duration) in durations.enumerated() {
            usleep(35_000)
            if index % 2 == 0 {
                client.get("/spin?us=\(Int(duration * 1000))")
            } else {
                try loop.submit {
                    let start = nowNanoseconds()
                    _ = benchSpin(milliseconds: duration)
                    injected.withLock { $0.append((.init(start: start, duration: nowNanoseconds() - start), "tasks")) }
                }.wait()
            }
        }
        usleep(100_000)
        probe?.stop()
        monitor?.stop()
        try server.close()
        let truth = injected.withLock { $0 }
        var detections: [DetectionQuality.Detection] = []
        var phasesRight = 0.0
        if monitored {
            let reports = try ReportReader.scan(directory: directory).reports.map(\.report)
            detections = reports.map(DetectionQuality.Detection.init)
            let right = reports.filter { report in
                truth.contains { item in
                    item.0.start <= report.start.monotonicNs + 2_000_000
                        && report.start.monotonicNs <= item.0.start + item.0.duration && item.phase == report.phase
                }
            }.count
            phasesRight = reports.isEmpty ? 0 : Double(right) / Double(reports.count)
        } else {
            detections = probe?.detections ?? []
        }
        return Outcome(injected: truth.map(\.0), detections: detections, phasesRight: phasesRight)
    }
}

/// A NIOHTTP1 server answering "hello" (keep-alive); `/spin?us=N` burns N µs in channelRead first and reports it.
final class BenchHTTPServer: Sendable {
    let channel: any Channel
    var port: Int { channel.localAddress?.port ?? 0 }

    init(group: any EventLoopGroup, injected: (@Sendable (UInt64, UInt64) -> Void)?) throws {
        channel = try ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.pipeline.configureHTTPServerPipeline().flatMap {
                    channel.pipeline.addHandler(BenchHTTPHandler(injected: injected))
                }
            }
            .bind(host: "127.0.0.1", port: 0).wait()
    }

    func close() throws {
        try channel.close().wait()
    }
}

final class BenchHTTPHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart
    let injected: (@Sendable (UInt64, UInt64) -> Void)?

    init(injected: (@Sendable (UInt64, UInt64) -> Void)?) {
        self.injected = injected
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            if head.uri.hasPrefix("/spin?us="), let micros = Double(head.uri.dropFirst(9)) {
                let start = nowNanoseconds()
                _ = benchSpin(milliseconds: micros / 1000)
                injected?(start, nowNanoseconds() - start)
            }
        case .body:
            break
        case .end:
            var headers = HTTPHeaders()
            headers.add(name: "content-length", value: "5")
            context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .ok, headers: headers))),
                          promise: nil)
            context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: "hello")))), promise: nil)
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        }
    }
}

/// One keep-alive connection to 127.0.0.1 sending GETs one at a time (the stalls' I/O-phase trigger).
final class BenchHTTPClient {
    private let fd: Int32

    init(port: Int) {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
    }

    deinit {
        close(fd)
    }

    func get(_ path: String) {
        let request = Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
        guard write(fd, request, request.count) == request.count else { return }
        var response: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !String(decoding: response, as: UTF8.self).hasSuffix("hello") {
            let count = read(fd, &buffer, buffer.count)
            if count <= 0 { return }
            response += buffer[0..<count]
        }
    }
}

/// The path of `name` on PATH, if any.
func findExecutable(_ name: String) -> String? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
    return path.split(separator: ":").map { "\($0)/\(name)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
}

/// Runs a program and returns its standard output.
func runCapturing(_ program: String, _ arguments: [String]) throws -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: program)
    process.arguments = arguments
    let pipe = Pipe()
    process.standardOutput = pipe
    try process.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return String(decoding: data, as: UTF8.self)
}
