import ArgumentParser
import CStallmonConcurrency
import CStallmonConcurrencyTesting
import CStallmonLoopShims
import Foundation
import Instrumentation
import Stallmon

/// 8. Swift Concurrency: what `ConcurrencyStallMonitor` costs per job (the global executor's hooks, queues and the
/// worker's probe) beside the runtime's own executor, and how well it finds stalls in async code beside a
/// heartbeat task (a task that sleeps 10 ms and measures its lateness, the method users write by hand today).
///
/// The hooks are process-wide, so every measurement runs in a child process of its own (`stallmon-bench
/// async-child`): monitor off, on, and on with pool_statistics = off, in rotating order, compared by round. The cost
/// is the CPU time of the threads that
/// enqueue and run the jobs (every thread but the monitor's own and the idle main thread, from schedstat) per
/// operation, as section 1 measures the loop thread's. The monitor's threshold is 10 s there, so no workload job
/// is a stall: sampling a stall costs what section 2 measures, and is no per-job cost.
struct AsyncJobs {
    let quick: Bool
    let scratch: String

    static let workloads = ["yield", "actor", "group"]

    func run(_ results: Results) throws {
        try cost(results)
        try detection(results)
        try starvation(results)
        try hummingbird(results)
    }

    /// Nanoseconds `StallLabel.withValue` adds per call, in a task (the table entry taken and given back, the
    /// task-local bound), beside the same loop calling an empty async function. `traced`: inside a `ServiceContext`
    /// for which the installed instrument injects a `traceparent`, as a tracer does for a request's span.
    static func labelCost(calls: Int, traced: Bool = false) -> Double {
        let result = Box<Double>(0)
        let done = DispatchSemaphore(value: 0)
        Task.detached {
            @inline(never) func body() async -> Int { 1 }
            func measure() async -> Double {
                var sum = 0
                let plainStart = nowNanoseconds()
                for _ in 0..<calls { sum &+= await body() }
                let plain = nowNanoseconds() - plainStart
                let labelledStart = nowNanoseconds()
                for _ in 0..<calls { sum &+= await StallLabel.withValue("GET /users/{id}") { await body() } }
                let labelled = nowNanoseconds() - labelledStart
                precondition(sum > 0)
                return (Double(labelled) - Double(plain)) / Double(calls)
            }
            if traced {
                BenchTraceparent.bootstrapOnce
                var context = ServiceContext.topLevel
                context[BenchTraceparent.Key.self] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
                result.value = await ServiceContext.withValue(context) { await measure() }
            } else {
                result.value = await measure()
            }
            done.signal()
        }
        done.wait()
        return result.value
    }

    /// Nanoseconds the watchdog spends reading a stalled task's label: the task's task-local bindings walked (the
    /// label's scope under a request's `ServiceContext` and two more bindings) and the table entry copied. Read here
    /// by the task itself, with the same system calls.
    static func labelReadCost(reads: Int) -> Double {
        let result = Box<Double>(0)
        let done = DispatchSemaphore(value: 0)
        Task.detached {
            var context = ServiceContext.topLevel
            context[BenchTraceparent.Key.self] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
            result.value = await ServiceContext.withValue(context) {
                await StallLabel.withValue("GET /users/{id}") {
                    await BenchTraceparent.$depth.withValue(1) {
                        await BenchTraceparent.$depth.withValue(2) {
                            let task = withUnsafeCurrentTask { $0.map { unsafeBitCast($0, to: UInt.self) } } ?? 0
                            var id: UInt64 = 0
                            var entry = cstallmon_label_entry()
                            let start = nowNanoseconds()
                            for _ in 0..<reads {
                                precondition(cstallmon_task_local_value(task, &id) == 1)
                                precondition(cstallmon_label_lookup(id, &entry) == 1)
                            }
                            return Double(nowNanoseconds() - start) / Double(reads)
                        }
                    }
                }
            }
            done.signal()
        }
        done.wait()
        return result.value
    }

    // MARK: Starvation

    /// Bursts that block every worker for 60–400 ms (half under the threshold, half over) with short jobs queued
    /// behind them: a starvation report for each burst over the threshold and none for the others, and the reported
    /// saturation beside the one the blockers measured (the last one's begin to the first one's end).
    private func starvation(_ results: Results) throws {
        let bursts = quick ? 20 : 100
        print("\n8d. \(bursts) bursts that block every worker (threshold 100 ms, half just under), short jobs queued behind")
        let directory = scratch + "/async-starvation"
        let measurement = try Self.child(["--workload", "starvation", "--monitor", "on", "--count", String(bursts),
                                          "--report-dir", directory])
        let reports = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [])
            .filter { $0.hasPrefix("stall-") && $0.hasSuffix(".json") }
            .compactMap { try? JSONDecoder().decode(StarvationDigest.self,
                                                    from: Data(contentsOf: URL(fileURLWithPath: directory + "/" + $0))) }
            .filter { $0.kind == "starvation" }
        let threshold = 100.0
        // Truth: each burst's saturation as its blockers measured it (begin = the last blocker's begin).
        let over = measurement.injected.filter { $0.milliseconds >= threshold }
        var matched = Set<String>()
        var errors: [Double] = []
        for burst in over {
            guard let report = reports.first(where: {
                !matched.contains($0.id) && abs(Int64(bitPattern: $0.start.monotonicNs &- burst.begin)) < 20_000_000
            }) else { continue }
            matched.insert(report.id)
            errors.append(abs(report.starvation.saturatedMs - burst.milliseconds))
        }
        let recall = over.isEmpty ? .nan : Double(matched.count) / Double(over.count) * 100
        let precision = reports.isEmpty ? .nan : Double(matched.count) / Double(reports.count) * 100
        results.add(Figure(section: "async", name: "starved bursts over the threshold: recall", value: recall, unit: "%",
                           target: "≥ 99 %", note: "\(matched.count) of \(over.count)"))
        results.add(Figure(section: "async", name: "starvation precision (reports that were real)", value: precision,
                           unit: "%", target: "≥ 99 %",
                           note: "\(reports.count - matched.count) false, \(reports.count) reports"))
        results.add(Figure(section: "async", name: "saturation time error, median", value: Stats.median(errors),
                           unit: "ms"))
        results.add(Figure(section: "async", name: "saturation time error, p99", value: Stats.percentile(errors, 0.99),
                           unit: "ms", target: "≤ 5 ms"))
    }

    struct StarvationDigest: Decodable {
        struct Start: Decodable { var monotonicNs: UInt64 }
        struct Starvation: Decodable { var saturatedMs: Double }
        var id: String
        var kind: String?
        var start: Start
        var starvation: Starvation
    }

    // MARK: A Hummingbird 2 hello-world route under wrk

    /// Tests/HummingbirdService's service (release build in .build-hb, made by scripts/bench.sh), plain and with
    /// both monitors (its event loops and its async code), alternating; `GET /fast` returns a constant.
    private func hummingbird(_ results: Results) throws {
        let service = ".build-hb/release/hb-stall-service"
        guard let wrk = findExecutable("wrk"), FileManager.default.isExecutableFile(atPath: service) else {
            print("\n8c. Hummingbird 2 under wrk: skipped (needs wrk and \(service); scripts/bench.sh builds both)")
            return
        }
        let seconds = quick ? 3 : 8
        let rounds = quick ? 1 : 5
        print("\n8c. Hummingbird 2 hello-world route under wrk (1 wrk thread, 32 connections, \(seconds) s × \(rounds) "
            + "alternating rounds), plain → NIOStallMonitor + ConcurrencyStallMonitor")
        var round = 0
        let (plain, monitored) = try NIOEventLoops.alternatingWrkRounds(
            wrk: wrk, rounds: rounds, seconds: seconds, path: "/fast"
        ) { withMonitor in
            let root = scratch + "/hb-\(round)"
            round += 1
            try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: service)
            process.arguments = [root + "/reports", root + "/port", withMonitor ? "monitor" : "plain"]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            let stop = {
                process.terminate()
                process.waitUntilExit()
            }
            var port: Int?
            for _ in 0..<500 where port == nil {
                usleep(20_000)
                port = (try? String(contentsOfFile: root + "/port", encoding: .utf8))
                    .flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
            }
            guard let port else {
                stop()
                throw BenchError("the Hummingbird service did not start")
            }
            return (port, stop)
        }
        let plainRPS = Stats.median(plain.map(\.rps))
        let monitoredRPS = Stats.median(monitored.map(\.rps))
        let plainP99 = Stats.median(plain.map(\.p99))
        let monitoredP99 = Stats.median(monitored.map(\.p99))
        let spread = { (values: [(rps: Double, p99: Double)]) in
            values.map { String(format: "%.0f", $0.rps) }.joined(separator: ", ")
        }
        results.add(Figure(section: "async", name: "Hummingbird: requests/s, plain → monitored", value: monitoredRPS,
                           unit: "req/s", peerName: "plain", peer: plainRPS, ratio: monitoredRPS / plainRPS,
                           ratioMeaning: "× plain", target: "≥ 0.98×",
                           note: "plain rounds: \(spread(plain)); monitored: \(spread(monitored))"))
        results.add(Figure(section: "async", name: "Hummingbird: p99 latency, plain → monitored", value: monitoredP99,
                           unit: "ms", peerName: "plain", peer: plainP99, ratio: monitoredP99 / plainP99,
                           ratioMeaning: "× plain", target: "within 2 %"))
    }

    // MARK: Per-job cost

    private func cost(_ results: Results) throws {
        // What the worker adds around each job, measured alone: the same inlined code as the hook's, on a scratch
        // probe (the end-to-end figures below are too noisy on 2 shared cores to resolve a few tens of ns).
        let iterations: UInt64 = quick ? 2_000_000 : 20_000_000
        // The default first, whatever an earlier monitor of this process left in the hooks' process-wide switch.
        cstallmon_concurrency_set_statistics(1)
        var perStamp: [Double] = []
        for _ in 0..<(quick ? 3 : 7) {
            perStamp.append(Double(cstallmon_concurrency_measure_stamps(iterations)) / Double(iterations))
        }
        results.add(Figure(section: "async", name: "the worker's stamps around one job (clock reads, stores)",
                           value: Stats.median(perStamp), unit: "ns",
                           note: "runs: " + perStamp.map { String(format: "%.1f", $0) }.joined(separator: ", ")))
        // The same with pool_statistics = off: no enqueue stamp, no histogram (what stall detection alone needs).
        cstallmon_concurrency_set_statistics(0)
        var perLeanStamp: [Double] = []
        for _ in 0..<(quick ? 3 : 7) {
            perLeanStamp.append(Double(cstallmon_concurrency_measure_stamps(iterations)) / Double(iterations))
        }
        cstallmon_concurrency_set_statistics(1)
        results.add(Figure(section: "async", name: "… with pool_statistics = off (the begin stamp; "
                               + "the end only for a job seen running)",
                           value: Stats.median(perLeanStamp), unit: "ns",
                           note: "runs: " + perLeanStamp.map { String(format: "%.1f", $0) }.joined(separator: ", ")))

        // A label set once per request: StallLabel.withValue around an empty body, beside the same loop without it.
        let calls = quick ? 200_000 : 1_000_000
        var perLabel: [Double] = []
        for _ in 0..<(quick ? 3 : 7) { perLabel.append(Self.labelCost(calls: calls)) }
        results.add(Figure(section: "async", name: "StallLabel.withValue, per call (once per request)",
                           value: Stats.median(perLabel), unit: "ns",
                           note: "runs: " + perLabel.map { String(format: "%.1f", $0) }.joined(separator: ", ")))
        var perTracedLabel: [Double] = []
        for _ in 0..<(quick ? 3 : 7) { perTracedLabel.append(Self.labelCost(calls: calls / 4, traced: true)) }
        results.add(Figure(section: "async", name: "… in a traced request (the tracer's traceparent injected, its ids kept)",
                           value: Stats.median(perTracedLabel), unit: "ns",
                           note: "runs: " + perTracedLabel.map { String(format: "%.1f", $0) }.joined(separator: ", ")))
        // The watchdog's read of a stalled task's label: needs the task-local layout check, which a monitor runs.
        if cstallmon_task_locals_layout() == 0 { StallLabel.checkLayout(logger: .init(label: "bench")) }
        for _ in 0..<200 where cstallmon_task_locals_layout() == 0 { usleep(5_000) }
        if cstallmon_task_locals_layout() == 1 {
            var perRead: [Double] = []
            for _ in 0..<(quick ? 3 : 7) { perRead.append(Self.labelReadCost(reads: quick ? 20_000 : 100_000)) }
            results.add(Figure(section: "async", name: "the watchdog's read of a stalled task's label, per stall",
                               value: Stats.median(perRead), unit: "ns",
                               note: "runs: " + perRead.map { String(format: "%.0f", $0) }.joined(separator: ", ")))
        }

        try workloadCost(results)
    }

    /// CPU time of the job threads per operation of each workload, monitor off → on (→ on, lean), in child
    /// processes run in rotating order.
    private func workloadCost(_ results: Results) throws {
        let rounds = quick ? 2 : 7
        let operations = quick ? 200_000 : 1_000_000
        print("\n8a. Swift Concurrency, CPU time of the job threads per operation (a yield, an actor call, a child "
            + "task), monitor off → on, and on with pool_statistics = off (\(operations) operations, "
            + "\(rounds) rounds of three child processes per workload, in rotating order)")
        let sides = ["off"] + Self.monitoredSides
        for workload in Self.workloads {
            var off: [Double] = []
            var monitoredCPU: [String: [Double]] = [:]
            var added: [String: [Double]] = [:]
            var jobsPerOperation: [Double] = []
            for round in 0..<rounds {
                // Rotate which runs first, so drift over the run does not favour one side.
                let order = (0..<sides.count).map { sides[($0 + round) % sides.count] }
                var measured: [String: AsyncChild.Measurement] = [:]
                for side in order {
                    measured[side] = try Self.child(["--workload", workload, "--monitor", side,
                                                     "--count", String(operations),
                                                     "--report-dir", scratch + "/async-cost"])
                }
                guard let plain = measured["off"], let watched = measured["on"], watched.jobs > 0 else { continue }
                // Per operation: an actor call on a free actor switches to it without enqueueing a job, so jobs
                // are not what the sides share; the monitored run counts the jobs the hooks saw.
                off.append(Double(plain.cpuNanoseconds) / Double(operations))
                for side in Self.monitoredSides {
                    guard let monitored = measured[side] else { continue }
                    let cpu = Double(monitored.cpuNanoseconds) / Double(operations)
                    monitoredCPU[side, default: []].append(cpu)
                    added[side, default: []].append(cpu - off.last!)
                }
                jobsPerOperation.append(Double(watched.jobs) / Double(operations))
            }
            let offMedian = Stats.median(off)
            let jobs = Stats.median(jobsPerOperation)
            for side in Self.monitoredSides {
                let sideAdded = added[side] ?? []
                let addedMedian = Stats.median(sideAdded)
                let mode = Self.modeSuffix(side)
                results.add(Figure(section: "async", name: "\(workload): CPU per operation, off → on\(mode)",
                                   value: Stats.median(monitoredCPU[side] ?? []), unit: "ns", peerName: "off",
                                   peer: offMedian,
                                   note: "pairs: "
                                       + sideAdded.map { String(format: "%.1f", $0) }.joined(separator: ", ")
                                       + String(format: "; %.2f jobs per operation", jobs)))
                results.add(Figure(section: "async", name: "\(workload): added per operation\(mode) (median of pairs)",
                                   value: addedMedian, unit: "ns", ratio: addedMedian / offMedian * 100,
                                   ratioMeaning: "% slower", target: "≤ 2 %",
                                   note: jobs > 0 ? String(format: "%.1f ns per job", addedMedian / jobs) : nil))
            }
            print(String(format: "     (%.2f jobs per operation)", jobs))
        }
    }

    // MARK: Detection

    private func detection(_ results: Results) throws {
        // pool_statistics = off reads a job's end only for jobs the watchdog saw running: the durations must stay
        // as exact.
        for side in Self.monitoredSides { try detection(results, side: side) }
    }

    /// The monitored sides of a comparison: statistics on (the default), and `pool_statistics = off` ("lean").
    static let monitoredSides = ["on", "lean"]

    /// What a figure's name adds for `side`.
    static func modeSuffix(_ side: String) -> String {
        side == "on" ? "" : " (pool_statistics = off)"
    }

    private func detection(_ results: Results, side: String) throws {
        let stalls = quick ? 40 : 200
        let mode = Self.modeSuffix(side)
        print("\n8b. \(stalls) injected async stalls (threshold 50 ms, half just under), stallmon\(mode) beside a "
            + "heartbeat task")
        let directory = scratch + "/async-detection-\(side)"
        let measurement = try Self.child(["--workload", "stalls", "--monitor", side, "--count", String(stalls),
                                          "--report-dir", directory])
        let reports = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [])
            .filter { $0.hasPrefix("stall-") && $0.hasSuffix(".json") }
            .compactMap { try? JSONDecoder().decode(ReportDigest.self,
                                                    from: Data(contentsOf: URL(fileURLWithPath: directory + "/" + $0))) }
        let threshold = 50.0
        // Truth: what each injected job measured itself (its own begin to end).
        let truth = measurement.injected
        let over = truth.filter { $0.milliseconds >= threshold }
        var detected = 0
        var errors: [Double] = []
        var scored: [ScoredStall] = []
        var delays: [Double] = []
        var matched = Set<String>()
        for stall in over {
            guard let report = reports.first(where: {
                !matched.contains($0.id) && $0.thread.tid == stall.tid && abs($0.start.monotonicNs.distance(to: stall.begin)) < 5_000_000
            }) else { continue }
            matched.insert(report.id)
            detected += 1
            errors.append(abs(report.durationMs - stall.milliseconds))
            scored.append(ScoredStall(stall: stall, report: report))
            if let elapsed = measurement.detections[report.id] { delays.append(elapsed - threshold) }
        }
        let falsePositives = reports.count - matched.count
        let recall = over.isEmpty ? .nan : Double(detected) / Double(over.count) * 100
        let precision = reports.isEmpty ? .nan : Double(matched.count) / Double(reports.count) * 100
        let heartbeat = measurement.heartbeat
        let heartbeatHits = over.filter { stall in heartbeat.contains { abs(Int64($0) - Int64(stall.begin)) < Int64(stall.milliseconds * 1e6) + 20_000_000 } }.count
        results.add(Figure(section: "async", name: "stalls over the threshold: recall\(mode)", value: recall, unit: "%",
                           peerName: "heartbeat", peer: over.isEmpty ? .nan : Double(heartbeatHits) / Double(over.count) * 100,
                           target: "≥ 99 %"))
        results.add(Figure(section: "async", name: "precision (reports that were real stalls)\(mode)", value: precision,
                           unit: "%", target: "≥ 99 %", note: "\(falsePositives) false, \(reports.count) reports"))
        results.add(Figure(section: "async", name: "detection delay after the crossing, p50\(mode)",
                           value: Stats.median(delays), unit: "ms"))
        results.add(Figure(section: "async", name: "detection delay after the crossing, p99\(mode)",
                           value: Stats.percentile(delays, 0.99), unit: "ms", target: "≤ 10 ms"))
        results.add(Figure(section: "async", name: "duration error, median\(mode)", value: Stats.median(errors),
                           unit: "ms"))
        let worst = scored.sorted { abs($0.error) > abs($1.error) }.prefix(5)
        results.add(Figure(section: "async", name: "duration error, p99\(mode)", value: Stats.percentile(errors, 0.99),
                           unit: "ms", target: "≤ 1 ms",
                           note: "worst: " + worst.map { String(format: "%+.2f ms", $0.error) }.joined(separator: ", ")))
        print("     worst duration errors\(mode) (report − the job's own measure):")
        for stall in worst { print("       " + stall.description) }
    }

    /// One injected stall beside the report that matched it: what explains a duration error.
    struct ScoredStall: CustomStringConvertible {
        var stall: AsyncChild.Injected
        var report: ReportDigest

        /// Reported minus true duration, ms.
        var error: Double { report.durationMs - stall.milliseconds }

        var description: String {
            var parts = [String(format: "%+.2f ms", error), String(format: "true %.1f ms", stall.milliseconds),
                         stall.kind ?? "?", "source \(report.durationSource ?? "?")"]
            if let frozen = report.frozenMs { parts.append(String(format: "frozen %.1f ms", frozen)) }
            if let figures = report.threadStats {
                parts.append(String(format: "cpu %.1f ms, run delay %.1f ms", figures.cpuMs, figures.runDelayMs))
            }
            parts.append(String(format: "start off by %+.2f ms",
                                Double(Int64(bitPattern: report.start.monotonicNs &- stall.begin)) / 1e6))
            return parts.joined(separator: ", ")
        }
    }

    /// What a report says that the score needs.
    struct ReportDigest: Decodable {
        struct Thread: Decodable { var tid: Int32 }
        struct Start: Decodable { var monotonicNs: UInt64 }
        var id: String
        var thread: Thread
        var start: Start
        var durationMs: Double
        var durationSource: String?
        var frozenMs: Double?
        struct ThreadFigures: Decodable {
            var cpuMs: Double
            var runDelayMs: Double
        }
        var threadStats: ThreadFigures?
    }

    static func child(_ arguments: [String]) throws -> AsyncChild.Measurement {
        let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
            ?? CommandLine.arguments[0]
        let output = try runCapturing(executable, ["async-child"] + arguments)
        guard let line = output.split(separator: "\n").last,
              let measurement = try? JSONDecoder().decode(AsyncChild.Measurement.self, from: Data(line.utf8)) else {
            throw BenchError("async-child \(arguments.joined(separator: " ")) printed no measurement: \(output)")
        }
        return measurement
    }
}

/// `stallmon-bench async-child`: one workload in a process of its own, monitor on or off; prints one JSON line.
struct AsyncChild: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "async-child",
                                                    abstract: "One Swift Concurrency workload (used by `run`).")

    struct Injected: Codable {
        var tid: Int32
        var begin: UInt64
        var milliseconds: Double
        /// "spin" or "usleep".
        var kind: String?
    }

    struct Measurement: Codable {
        var cpuNanoseconds: UInt64
        var wallNanoseconds: UInt64
        var jobs: UInt64
        var injected: [Injected] = []
        /// Report id → how long the job had run when the watchdog noticed it (`stall.begin`'s `elapsedMs`).
        var detections: [String: Double] = [:]
        /// When the heartbeat task found itself late by more than the threshold (CLOCK_MONOTONIC ns).
        var heartbeat: [UInt64] = []
    }

    @Option var workload: String
    @Option var monitor: String
    @Option var count: Int
    @Option var reportDir: String

    func run() throws {
        var monitorInstance: ConcurrencyStallMonitor?
        let threshold = workload == "stalls" ? 50 : workload == "starvation" ? 100 : 10_000
        if monitor == "on" || monitor == "lean" {
            var configuration = StallMonitorConfiguration(detection: .init(threshold: .milliseconds(threshold)),
                                                          reports: .init(directory: reportDir))
            configuration.analysis.poolStatistics = monitor == "on"
            configuration.detection.sampleInterval = .milliseconds(5)
            configuration.detection.interimAfter = .milliseconds(threshold * 4)
            configuration.reports.maxReportsPerSignaturePerHour = 100_000
            monitorInstance = try ConcurrencyStallMonitor(configuration: configuration)
            monitorInstance?.start()
        }
        // Both sides wait the same: the monitor's threads settle (the writer loads the symbol tables) before the
        // workload starts.
        usleep(1_000_000)
        let jobsBefore = ConcurrencyStallMonitor.jobsTimed
        let cpuBefore = Self.jobThreadsCPU()
        let wallBefore = nowNanoseconds()
        let done = DispatchSemaphore(value: 0)
        let measurement = Box(Measurement(cpuNanoseconds: 0, wallNanoseconds: 0, jobs: 0))
        let workload = workload
        let count = count
        if workload == "starvation" {
            // From this thread, no worker: the short jobs are enqueued while every worker is blocked.
            measurement.value.injected = Self.injectStarvations(count, threshold: threshold)
            done.signal()
        } else { Task.detached {
            switch workload {
            case "yield": await Self.yieldPingPong(count)
            case "actor": await Self.actorCalls(count)
            case "group": await Self.taskGroup(count)
            case "stalls": measurement.value.injected = await Self.injectStalls(count, threshold: threshold,
                                                                                  heartbeat: measurement)
            default: break
            }
            done.signal()
        } }
        done.wait()
        measurement.value.cpuNanoseconds = Self.jobThreadsCPU() &- cpuBefore
        measurement.value.wallNanoseconds = nowNanoseconds() - wallBefore
        measurement.value.jobs = ConcurrencyStallMonitor.jobsTimed - jobsBefore
        monitorInstance?.stop()
        if workload == "stalls" { measurement.value.detections = Self.detections(in: reportDir + "/events.jsonl") }
        let encoded = try JSONEncoder().encode(measurement.value)
        print(String(decoding: encoded, as: UTF8.self))
    }

    /// CPU time (ns, schedstat) of every thread of this process but the main thread and the monitor's own
    /// (`stallmon-*`): the threads that enqueue and run jobs, libdispatch's workers.
    static func jobThreadsCPU() -> UInt64 {
        let main = getpid()
        var total: UInt64 = 0
        for name in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? [] {
            guard let tid = Int32(name), tid != main else { continue }
            let comm = (try? String(contentsOfFile: "/proc/self/task/\(name)/comm", encoding: .utf8)) ?? ""
            if comm.hasPrefix("stallmon-") { continue }
            let schedstat = (try? String(contentsOfFile: "/proc/self/task/\(name)/schedstat", encoding: .utf8)) ?? ""
            total &+= UInt64(schedstat.split(separator: " ").first ?? "0") ?? 0
        }
        return total
    }

    /// Two tasks yielding in turn: every yield is a job.
    static func yieldPingPong(_ count: Int) async {
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<2 { group.addTask { for _ in 0..<count / 2 { await Task.yield() } } }
        }
    }

    actor Counter {
        var value = 0
        func bump() -> Int {
            value += 1
            return value
        }
    }

    /// Two tasks calling one actor at once: each call hops to the actor and back (a free actor is switched to
    /// without a job; a busy one gets a drain job).
    static func actorCalls(_ count: Int) async {
        let counter = Counter()
        await withTaskGroup(of: Int.self) { group in
            for _ in 0..<2 {
                group.addTask {
                    var total = 0
                    for _ in 0..<count / 2 { total &+= await counter.bump() }
                    return total
                }
            }
            for await total in group { precondition(total > 0) }
        }
    }

    /// A task group of tiny child tasks.
    static func taskGroup(_ count: Int) async {
        let sum = await withTaskGroup(of: Int.self) { group in
            for index in 0..<count { group.addTask { index & 1 } }
            return await group.reduce(0, +)
        }
        precondition(sum >= 0)
    }

    /// `count` blocking jobs, half over the threshold (1.2–3×), half just under (0.6–0.9×), one at a time, beside a
    /// heartbeat task that sleeps 10 ms and notes when it woke later than the threshold.
    static func injectStalls(_ count: Int, threshold: Int, heartbeat: Box<Measurement>) async -> [Injected] {
        let stop = StopFlag()
        let beats = Box<[UInt64]>([])
        let heart = Task.detached {
            while !stop.isSet {
                let before = nowNanoseconds()
                try? await Task.sleep(for: .milliseconds(10))
                let late = Int64(nowNanoseconds() - before) - 10_000_000
                if late > Int64(threshold) * 1_000_000 { beats.value.append(before) }
            }
        }
        var generator = SystemRandomNumberGenerator()
        var injected: [Injected] = []
        for index in 0..<count {
            let factor = index % 2 == 0 ? Double.random(in: 1.2...3.0, using: &generator)
                : Double.random(in: 0.6...0.9, using: &generator)
            let milliseconds = Double(threshold) * factor
            let record = await Task.detached { () -> Injected in
                let begin = nowNanoseconds()
                if index % 4 < 2 {
                    _ = benchSpin(milliseconds: milliseconds)
                } else {
                    usleep(UInt32(milliseconds * 1000))
                }
                return Injected(tid: cstallmon_gettid(), begin: begin, milliseconds: Double(nowNanoseconds() - begin) / 1e6,
                                kind: index % 4 < 2 ? "spin" : "usleep")
            }.value
            injected.append(record)
            try? await Task.sleep(for: .milliseconds(30))
        }
        stop.set()
        await heart.value
        heartbeat.value.heartbeat = beats.value
        return injected
    }

    /// `count` bursts: as many blocking jobs as CPUs, each asleep for the burst's time (half 1.3–4× the threshold,
    /// half 0.6–0.9×), and 10 short jobs enqueued 5 ms later; a pause between bursts. Each burst's truth is its
    /// saturation as the blockers measured it: from the last one's begin to the first one's end.
    static func injectStarvations(_ count: Int, threshold: Int) -> [Injected] {
        let workers = ProcessInfo.processInfo.activeProcessorCount
        var generator = SystemRandomNumberGenerator()
        var bursts: [Injected] = []
        for index in 0..<count {
            let factor = index % 2 == 0 ? Double.random(in: 1.3...4.0, using: &generator)
                : Double.random(in: 0.6...0.9, using: &generator)
            let microseconds = UInt32(Double(threshold) * factor * 1000)
            let spans = Box<[(begin: UInt64, end: UInt64)]>([])
            let lock = NSLock()
            let finished = DispatchSemaphore(value: 0)
            for _ in 0..<workers {
                Task.detached {
                    let begin = nowNanoseconds()
                    // nanosleep resumed after EINTR: the sampling signal interrupts a stalled job's sleep.
                    var request = timespec(tv_sec: Int(microseconds / 1_000_000),
                                           tv_nsec: Int(microseconds % 1_000_000) * 1000)
                    var remaining = timespec()
                    while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
                    let end = nowNanoseconds()
                    lock.withLock { spans.value.append((begin, end)) }
                    finished.signal()
                }
            }
            usleep(5_000)
            for value in 0..<10 {
                Task.detached {
                    _ = value &* 3
                    finished.signal()
                }
            }
            for _ in 0..<(workers + 10) { finished.wait() }
            let (begin, end) = lock.withLock { (spans.value.map(\.begin).max() ?? 0, spans.value.map(\.end).min() ?? 0) }
            bursts.append(Injected(tid: 0, begin: begin, milliseconds: Double(end &- min(end, begin)) / 1e6))
            usleep(150_000)
        }
        return bursts
    }

    /// How long each stall's job had run when the watchdog noticed it, by report id (`stall.begin`'s `elapsedMs`).
    static func detections(in path: String) -> [String: Double] {
        struct Event: Decodable {
            var event: String
            var id: String?
            var elapsedMs: Double?
        }
        var result: [String: Double] = [:]
        let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        for line in text.split(separator: "\n") {
            guard let event = try? JSONDecoder().decode(Event.self, from: Data(line.utf8)), event.event == "stall.begin",
                  let id = event.id, let elapsed = event.elapsedMs else { continue }
            result[id] = elapsed
        }
        return result
    }
}

/// The bench's tracer, for the label's figures: injects the `traceparent` a context carries, as a W3C propagator
/// injects its span's. `depth` is a task-local of its own, bound around the label's scope like a service's others.
enum BenchTraceparent {
    enum Key: ServiceContextKey { typealias Value = String }

    @TaskLocal static var depth = 0

    static let bootstrapOnce: Void = InstrumentationSystem.bootstrap(Instrument())

    struct Instrument: Instrumentation.Instrument {
        func inject<Carrier, Inject: Injector>(_ context: ServiceContext, into carrier: inout Carrier,
                                               using injector: Inject) where Inject.Carrier == Carrier {
            if let traceparent = context[Key.self] { injector.inject(traceparent, forKey: "traceparent", into: &carrier) }
        }

        func extract<Carrier, Extract: Extractor>(_ carrier: Carrier, into context: inout ServiceContext,
                                                  using extractor: Extract) where Extract.Carrier == Carrier {}
    }
}
