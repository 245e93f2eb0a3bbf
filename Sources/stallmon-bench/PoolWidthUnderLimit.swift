import ArgumentParser
import Foundation
import Synchronization

/// Section `pool-width`: what a Swift Concurrency pool wider than the CPU limit costs (issue 43, item 3). The same
/// CPU-bound async load runs in a cgroup v1 cpu group limited to one CPU fewer than the pool's width, once with the
/// pool at the host's width and once narrowed to the limit by the affinity mask (`taskset`, the only narrowing knob
/// libdispatch has). Measured: how late a thread that wakes every 5 ms (an event loop's timer) runs, the group's
/// throttled periods, and the jobs done. Needs root and a writable `/sys/fs/cgroup/cpu`; skipped otherwise.
struct PoolWidthUnderLimit {
    let quick: Bool
    let benchExecutable: String

    func run(_ results: Results) throws {
        let width = ProcessInfo.processInfo.activeProcessorCount
        let root = "/sys/fs/cgroup/cpu"
        guard geteuid() == 0, access(root + "/cgroup.procs", W_OK) == 0, width >= 2 else {
            print("  pool-width: skipped (needs root, a writable \(root) and at least 2 CPUs)")
            return
        }
        let limit = width - 1
        let seconds = quick ? 2.0 : 6.0
        print("\nPool width against a CPU limit of \(limit) CPU (\(width)-CPU host, \(seconds) s of async load each)")
        let wide = try measure(root: root, limit: limit, narrowedTo: nil, seconds: seconds)
        let narrow = try measure(root: root, limit: limit, narrowedTo: limit, seconds: seconds)
        print("  (ours: the pool \(width) wide, as libdispatch makes it; peer: narrowed to \(limit) CPU by the affinity)")
        results.add(Figure(section: "pool-width", name: "wide pool under the limit: 5 ms timer late p99",
                           value: wide.latenessP99, unit: "ms", peerName: "narrowed", peer: narrow.latenessP99,
                           ratio: wide.latenessP99 / max(narrow.latenessP99, 0.001), ratioMeaning: "× later when wide"))
        results.add(Figure(section: "pool-width", name: "wide pool under the limit: 5 ms timer late max",
                           value: wide.latenessMax, unit: "ms", peerName: "narrowed", peer: narrow.latenessMax))
        results.add(Figure(section: "pool-width", name: "wide pool under the limit: periods throttled",
                           value: wide.throttledShare * 100, unit: "%", peerName: "narrowed", peer: narrow.throttledShare * 100))
        results.add(Figure(section: "pool-width", name: "wide pool under the limit: jobs done",
                           value: wide.jobsPerSecond, unit: "jobs/s", peerName: "narrowed", peer: narrow.jobsPerSecond,
                           ratio: narrow.jobsPerSecond / max(wide.jobsPerSecond, 1), ratioMeaning: "narrowed / wide"))
    }

    struct Measured: Decodable {
        var latenessP50: Double
        var latenessP99: Double
        var latenessMax: Double
        var jobsPerSecond: Double
        /// Filled in by the parent from the group's `cpu.stat`.
        var throttledShare: Double = 0

        enum CodingKeys: String, CodingKey {
            case latenessP50, latenessP99, latenessMax, jobsPerSecond
        }
    }

    private func measure(root: String, limit: Int, narrowedTo cpus: Int?, seconds: Double) throws -> Measured {
        let group = root + "/stallmon-bench-\(getpid())-\(cpus ?? 0)"
        try FileManager.default.createDirectory(atPath: group, withIntermediateDirectories: false)
        defer { rmdir(group) }
        try "100000".write(toFile: group + "/cpu.cfs_period_us", atomically: false, encoding: .utf8)
        try "\(limit * 100_000)".write(toFile: group + "/cpu.cfs_quota_us", atomically: false, encoding: .utf8)
        let before = Self.throttling(group)
        let output = FileManager.default.temporaryDirectory.path + "/stallmon-bench-pool-\(getpid()).json"
        let narrowing = cpus.map { "taskset -c 0-\($0 - 1) " } ?? ""
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", "echo $$ > \(group)/cgroup.procs && exec \(narrowing)\"$0\" pool-load "
                                + "--seconds \(seconds) > \(output)", benchExecutable]
        try process.run()
        process.waitUntilExit()
        let after = Self.throttling(group)
        var measured = try JSONDecoder().decode(Measured.self, from: Data(contentsOf: URL(fileURLWithPath: output)))
        try? FileManager.default.removeItem(atPath: output)
        let periods = after.periods - before.periods
        measured.throttledShare = periods > 0 ? Double(after.throttled - before.throttled) / Double(periods) : 0
        print(String(format: "    %@: lateness p50 %.2f ms, p99 %.2f ms, max %.2f ms; %.0f %% of periods throttled; "
                     + "%.0f jobs/s", cpus == nil ? "wide" : "narrowed", measured.latenessP50, measured.latenessP99,
                     measured.latenessMax, measured.throttledShare * 100, measured.jobsPerSecond))
        return measured
    }

    private static func throttling(_ group: String) -> (periods: Double, throttled: Double) {
        let text = (try? String(contentsOfFile: group + "/cpu.stat", encoding: .utf8)) ?? ""
        var values: [Substring: Double] = [:]
        for line in text.split(separator: "\n") {
            let pair = line.split(separator: " ")
            if pair.count == 2 { values[pair[0]] = Double(pair[1]) }
        }
        return (values["nr_periods"] ?? 0, values["nr_throttled"] ?? 0)
    }
}

final class JobCounter: Sendable {
    let count = Atomic<Int>(0)
}

/// The child of section `pool-width`: CPU-bound async jobs of 2 ms (many more tasks than workers, so the pool runs
/// at its full width), beside a plain thread that sleeps 5 ms at a time and records how late it wakes. Prints the
/// figures as JSON.
struct PoolLoad: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "pool-load", shouldDisplay: false)

    @Option(help: "How long to run.")
    var seconds: Double = 6

    func run() throws {
        let stop = StopFlag()
        let jobs = JobCounter()
        let finished = DispatchSemaphore(value: 0)
        let load = Task.detached {
            await withTaskGroup(of: Void.self) { group in
                for _ in 0..<64 {
                    group.addTask {
                        while !stop.isSet {
                            _ = benchSpin(milliseconds: 2)
                            jobs.count.add(1, ordering: .relaxed)
                            await Task.yield()
                        }
                    }
                }
            }
            finished.signal()
        }
        _ = load
        var lateness: [Double] = []
        let start = nowNanoseconds()
        let end = start + UInt64(seconds * 1e9)
        while nowNanoseconds() < end {
            let before = nowNanoseconds()
            usleep(5000)
            lateness.append(Double(nowNanoseconds() - before) / 1e6 - 5)
        }
        let elapsed = Double(nowNanoseconds() - start) / 1e9
        stop.set()
        finished.wait()
        let figures = [
            "latenessP50": Stats.median(lateness), "latenessP99": Stats.percentile(lateness, 0.99),
            "latenessMax": lateness.max() ?? 0, "jobsPerSecond": Double(jobs.count.load(ordering: .relaxed)) / elapsed,
        ]
        FileHandle.standardOutput.write(try JSONEncoder().encode(figures))
    }
}
