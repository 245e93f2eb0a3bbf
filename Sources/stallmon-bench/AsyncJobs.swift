import ArgumentParser
import Foundation
import CStallmonCapture
import Stallmon

/// 8. Swift Concurrency: what `ConcurrencyStallMonitor` costs per job (the global executor's hooks, queues and the
/// worker's probe) beside the runtime's own executor, and how well it finds stalls in async code beside a
/// heartbeat task (a task that sleeps 10 ms and measures its lateness, the method users write by hand today).
///
/// The hooks are process-wide, so every measurement runs in a child process of its own (`stallmon-bench
/// async-child`), monitor off and on alternately, paired by round. The cost is the process's CPU time per job:
/// the enqueueing, dispatch's scheduling and the job itself, whichever thread pays for it.
struct AsyncJobs {
    let quick: Bool
    let scratch: String

    static let workloads = ["yield", "actor", "group"]

    func run(_ results: Results) throws {
        try cost(results)
        try detection(results)
    }

    // MARK: Per-job cost

    private func cost(_ results: Results) throws {
        let rounds = quick ? 2 : 7
        print("\n8a. Swift Concurrency, CPU time per job, monitor off → on (\(rounds) alternating pairs of child "
            + "processes per workload)")
        for workload in Self.workloads {
            var off: [Double] = []
            var on: [Double] = []
            var added: [Double] = []
            for round in 0..<rounds {
                // Alternate which runs first, so drift over the run does not favour one side.
                let order = round % 2 == 0 ? [false, true] : [true, false]
                var pair: [Bool: AsyncChild.Measurement] = [:]
                for monitored in order {
                    pair[monitored] = try Self.child(["--workload", workload, "--monitor", monitored ? "on" : "off",
                                                      "--count", String(quick ? 200_000 : 1_000_000),
                                                      "--report-dir", scratch + "/async-cost"])
                }
                guard let plain = pair[false], let watched = pair[true], watched.jobs > 0 else { continue }
                // The same workload runs the same jobs; the monitored run counts them.
                let jobs = Double(watched.jobs)
                off.append(Double(plain.cpuNanoseconds) / jobs)
                on.append(Double(watched.cpuNanoseconds) / jobs)
                added.append(on.last! - off.last!)
            }
            let offMedian = Stats.median(off)
            let addedMedian = Stats.median(added)
            results.add(Figure(section: "async", name: "\(workload): CPU per job, off → on", value: Stats.median(on),
                               unit: "ns", peerName: "off", peer: offMedian,
                               note: "pairs: " + added.map { String(format: "%.1f", $0) }.joined(separator: ", ")))
            results.add(Figure(section: "async", name: "\(workload): added per job (median of pairs)",
                               value: addedMedian, unit: "ns", ratio: addedMedian / offMedian * 100,
                               ratioMeaning: "% slower", target: "≤ 2 %"))
        }
    }

    // MARK: Detection

    private func detection(_ results: Results) throws {
        let stalls = quick ? 40 : 200
        print("\n8b. \(stalls) injected async stalls (threshold 50 ms, half just under), stallmon beside a heartbeat task")
        let directory = scratch + "/async-detection"
        let measurement = try Self.child(["--workload", "stalls", "--monitor", "on", "--count", String(stalls),
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
        var delays: [Double] = []
        var matched = Set<String>()
        for stall in over {
            guard let report = reports.first(where: {
                !matched.contains($0.id) && $0.thread.tid == stall.tid && abs($0.start.monotonicNs.distance(to: stall.begin)) < 5_000_000
            }) else { continue }
            matched.insert(report.id)
            detected += 1
            errors.append(abs(report.durationMs - stall.milliseconds))
            if let elapsed = measurement.detections[report.id] { delays.append(elapsed - threshold) }
        }
        let falsePositives = reports.count - matched.count
        let recall = over.isEmpty ? .nan : Double(detected) / Double(over.count) * 100
        let precision = reports.isEmpty ? .nan : Double(matched.count) / Double(reports.count) * 100
        let heartbeat = measurement.heartbeat
        let heartbeatHits = over.filter { stall in heartbeat.contains { abs(Int64($0) - Int64(stall.begin)) < Int64(stall.milliseconds * 1e6) + 20_000_000 } }.count
        results.add(Figure(section: "async", name: "stalls over the threshold: recall", value: recall, unit: "%",
                           peerName: "heartbeat", peer: over.isEmpty ? .nan : Double(heartbeatHits) / Double(over.count) * 100,
                           target: "≥ 99 %"))
        results.add(Figure(section: "async", name: "precision (reports that were real stalls)", value: precision,
                           unit: "%", target: "≥ 99 %", note: "\(falsePositives) false, \(reports.count) reports"))
        results.add(Figure(section: "async", name: "detection delay after the crossing, p50", value: Stats.median(delays),
                           unit: "ms"))
        results.add(Figure(section: "async", name: "detection delay after the crossing, p99",
                           value: Stats.percentile(delays, 0.99), unit: "ms", target: "≤ 10 ms"))
        results.add(Figure(section: "async", name: "duration error, median", value: Stats.median(errors), unit: "ms"))
        results.add(Figure(section: "async", name: "duration error, p99", value: Stats.percentile(errors, 0.99),
                           unit: "ms", target: "≤ 1 ms"))
    }

    /// What a report says that the score needs.
    struct ReportDigest: Decodable {
        struct Thread: Decodable { var tid: Int32 }
        struct Start: Decodable { var monotonicNs: UInt64 }
        var id: String
        var thread: Thread
        var start: Start
        var durationMs: Double
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
        let threshold = workload == "stalls" ? 50 : 100
        if monitor == "on" {
            var configuration = StallMonitorConfiguration(threshold: .milliseconds(threshold),
                                                          reportDirectory: reportDir)
            configuration.sampleInterval = .milliseconds(5)
            configuration.maxReportsPerSignaturePerHour = 100_000
            monitorInstance = try ConcurrencyStallMonitor(configuration: configuration)
            monitorInstance?.start()
        }
        let jobsBefore = ConcurrencyStallMonitor.jobsTimed
        let cpuBefore = Self.processCPU()
        let wallBefore = nowNanoseconds()
        let done = DispatchSemaphore(value: 0)
        let measurement = Box(Measurement(cpuNanoseconds: 0, wallNanoseconds: 0, jobs: 0))
        let workload = workload
        let count = count
        Task.detached {
            switch workload {
            case "yield": await Self.yieldPingPong(count)
            case "actor": await Self.actorCalls(count)
            case "group": await Self.taskGroup(count)
            case "stalls": measurement.value.injected = await Self.injectStalls(count, threshold: threshold,
                                                                                  heartbeat: measurement)
            default: break
            }
            done.signal()
        }
        done.wait()
        measurement.value.cpuNanoseconds = Self.processCPU() - cpuBefore
        measurement.value.wallNanoseconds = nowNanoseconds() - wallBefore
        measurement.value.jobs = ConcurrencyStallMonitor.jobsTimed - jobsBefore
        monitorInstance?.stop()
        if workload == "stalls" { measurement.value.detections = Self.detections(in: reportDir + "/events.jsonl") }
        let encoded = try JSONEncoder().encode(measurement.value)
        print(String(decoding: encoded, as: UTF8.self))
    }

    static func processCPU() -> UInt64 {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return UInt64(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1_000_000_000
            + UInt64(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1000
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

    /// A task calling another actor: each call hops to the actor and back.
    static func actorCalls(_ count: Int) async {
        let counter = Counter()
        var total = 0
        for _ in 0..<count / 2 { total &+= await counter.bump() }
        precondition(total > 0)
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
                return Injected(tid: cstallmon_gettid(), begin: begin, milliseconds: Double(nowNanoseconds() - begin) / 1e6)
            }.value
            injected.append(record)
            try? await Task.sleep(for: .milliseconds(30))
        }
        stop.set()
        await heart.value
        heartbeat.value.heartbeat = beats.value
        return injected
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
