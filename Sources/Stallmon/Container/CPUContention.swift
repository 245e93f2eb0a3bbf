#if canImport(Glibc)
import Glibc
#endif
import Metrics
import StallmonReport
import Synchronization

/// What withheld the CPU from the process while a thread stalled: its cgroup's CPU limit (periods throttled, time
/// throttled), CPU pressure (of the cgroup on v2, else of the host) and the hypervisor's steal. Read by the
/// watchdog when it first sees an iteration busy, and again at each report of the stall; never on a monitored
/// thread. One per process (`Watchdog.process`), since every thread of it shares the cgroup.
final class CPUContention: Sendable {
    /// The cumulative counters at one moment.
    struct Reading: Sendable, Equatable {
        var at: UInt64
        var throttling: CgroupCPU.Throttling?
        /// `some total=` of the CPU pressure file, µs.
        var pressureSomeMicroseconds: UInt64?
    }

    /// The host's steal (`/proc/stat`, in clock ticks, summed over CPUs) at one moment. Read only when a stall is
    /// reported: `/proc/stat` costs more than the other files on a host with many CPUs.
    struct StealReading: Sendable, Equatable {
        var at: UInt64
        var ticks: UInt64
    }

    private struct Discovered: Sendable {
        var cgroup: CgroupCPU?
        var pressurePath: String?
    }

    private let discovered = Mutex<Discovered?>(nil)
    fileprivate let readFile: @Sendable (String) -> String?

    init(readFile: @escaping @Sendable (String) -> String? = ProcFile.read) {
        self.readFile = readFile
    }

    /// The limit, found on first use (on the watchdog: its first pass over a source), or nil.
    var cgroup: CgroupCPU? { discover().cgroup }

    /// The counters now.
    func read(now: UInt64) -> Reading {
        let found = discover()
        return Reading(at: now, throttling: found.cgroup?.readThrottling(readFile: readFile),
                       pressureSomeMicroseconds: found.pressurePath.flatMap(readFile).flatMap(Self.someTotal))
    }

    /// The host's steal now, or nil without `/proc/stat`.
    func readSteal(now: UInt64) -> StealReading? {
        readFile("/proc/stat").flatMap(Self.stealTicks).map { StealReading(at: now, ticks: $0) }
    }

    /// The figures of the span from `start` to `end` (and of steal from `stealStart`).
    func figures(from start: Reading, to end: Reading, stealFrom stealStart: StealReading?,
                 stealTo stealEnd: StealReading?, watchdogRunDelayNanoseconds: UInt64?) -> StallReport.CPUContention? {
        let found = discover()
        return Self.figures(cgroup: found.cgroup, pressureScope: found.pressureScope, from: start, to: end,
                     stealFrom: stealStart, stealTo: stealEnd, ticksPerSecond: UInt64(max(1, sysconf(Int32(_SC_CLK_TCK)))),
                     onlineCPUs: UInt64(max(1, sysconf(Int32(_SC_NPROCESSORS_ONLN)))),
                     watchdogRunDelayNanoseconds: watchdogRunDelayNanoseconds)
    }

    /// Pure: the figures from two readings. nil when nothing could be read.
    static func figures(cgroup: CgroupCPU?, pressureScope: String?, from start: Reading, to end: Reading,
                        stealFrom stealStart: StealReading?, stealTo stealEnd: StealReading?,
                        ticksPerSecond: UInt64, onlineCPUs: UInt64,
                        watchdogRunDelayNanoseconds: UInt64?) -> StallReport.CPUContention? {
        guard end.at > start.at else { return nil }
        let window = end.at - start.at
        var figures = StallReport.CPUContention(windowMs: Double(window) / 1e6)
        if let cgroup, let before = start.throttling, let after = end.throttling {
            figures.limit = StallReport.CPULimit(cpus: cgroup.limit.cpus,
                                                 periodMs: Double(cgroup.limit.periodMicroseconds) / 1e3,
                                                 cgroup: cgroup.groupName, version: cgroup.version.rawValue)
            if let growth = after.growth(since: before) {
                figures.periods = Int(clamping: growth.periods)
                figures.throttledPeriods = Int(clamping: growth.throttledPeriods)
                figures.throttledMs = Double(growth.throttledNanoseconds) / 1e6
            }
        }
        if let before = start.pressureSomeMicroseconds, let after = end.pressureSomeMicroseconds, after >= before {
            figures.pressureSomePercent = min(100, Double(after - before) * 1e3 / Double(window) * 100)
            figures.pressureScope = pressureScope
        }
        if let stealStart, let stealEnd, stealEnd.ticks >= stealStart.ticks, stealEnd.at > stealStart.at {
            let nanoseconds = Double(stealEnd.ticks - stealStart.ticks) * 1e9 / Double(ticksPerSecond)
            figures.stealMs = nanoseconds / Double(onlineCPUs) / 1e6
            figures.stealWindowMs = Double(stealEnd.at - stealStart.at) / 1e6
        }
        figures.watchdogRunDelayMs = watchdogRunDelayNanoseconds.map { Double($0) / 1e6 }
        return figures
    }

    /// `StallReport.CPUContention.throttledWallMs` in nanoseconds, for the classifier.
    static func throttledWallBound(_ figures: StallReport.CPUContention?) -> UInt64? {
        figures?.throttledWallMs.map { UInt64($0 * 1e6) }
    }

    /// The limit's throttling over one statistics window.
    struct WindowThrottling: Sendable, Equatable {
        var limitCPUs: Double
        var periods: UInt64
        var throttledPeriods: UInt64
        var throttledNanoseconds: UInt64
    }

    /// The throttling of the limit over consecutive windows (a `loop.stats` or `pool.stats` line's, the metrics'):
    /// each `close` gives the growth since the previous one. Owned by one reporter, stepped on the watchdog.
    struct ThrottlingWindow: Sendable {
        private var last: CgroupCPU.Throttling?

        /// The growth of the limit's counters since the last call: nil the first time (it opens the window),
        /// without a limit, or when a counter went back.
        mutating func close(_ contention: CPUContention) -> WindowThrottling? {
            guard let cgroup = contention.cgroup, let now = cgroup.readThrottling(readFile: contention.readFile) else {
                return nil
            }
            defer { last = now }
            guard let growth = last.flatMap(now.growth(since:)) else { return nil }
            return WindowThrottling(limitCPUs: cgroup.limit.cpus, periods: growth.periods,
                                    throttledPeriods: growth.throttledPeriods,
                                    throttledNanoseconds: growth.throttledNanoseconds)
        }
    }

    /// The limit as swift-metrics sees it, every 10 s, for the process (every thread shares the cgroup):
    /// `stallmon_cpu_limit_cpus`, `stallmon_cpu_periods_total`, `stallmon_cpu_throttled_periods_total`,
    /// `stallmon_cpu_throttled_seconds_total` (summed over CPUs). Nothing without a limit.
    struct Metrics {
        static let interval: UInt64 = 10_000_000_000
        private(set) var nextDue: UInt64
        private var window = ThrottlingWindow()
        private var opened = false
        /// Made at the first growth of a real limit: a backend that exports a metric from its making would
        /// otherwise show zeros for a process without one.
        private var made: (limit: Gauge, periods: Counter, throttledPeriods: Counter,
                           throttledSeconds: FloatingPointCounter)?

        init(opensAt now: UInt64) {
            nextDue = now
        }

        mutating func record(_ contention: CPUContention, now: UInt64) {
            nextDue = now + Self.interval
            guard opened else {
                opened = true
                _ = window.close(contention)
                return
            }
            guard let growth = window.close(contention) else { return }
            let metrics = made ?? (Gauge(label: "stallmon_cpu_limit_cpus"), Counter(label: "stallmon_cpu_periods_total"),
                                   Counter(label: "stallmon_cpu_throttled_periods_total"),
                                   FloatingPointCounter(label: "stallmon_cpu_throttled_seconds_total"))
            made = metrics
            metrics.limit.record(growth.limitCPUs)
            metrics.periods.increment(by: Int64(clamping: growth.periods))
            metrics.throttledPeriods.increment(by: Int64(clamping: growth.throttledPeriods))
            metrics.throttledSeconds.increment(by: Double(growth.throttledNanoseconds) / 1e9)
        }
    }

    // MARK: - Parsing

    /// `some avg10=… total=N` → N (µs).
    static func someTotal(_ text: String) -> UInt64? {
        for line in text.split(separator: "\n") where line.hasPrefix("some ") {
            for field in line.split(separator: " ") where field.hasPrefix("total=") {
                return UInt64(field.dropFirst("total=".count))
            }
        }
        return nil
    }

    /// The `cpu ` line of `/proc/stat`: its eighth value is steal, in clock ticks summed over CPUs.
    static func stealTicks(_ text: String) -> UInt64? {
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("cpu ") }) else { return nil }
        let values = line.split(separator: " ").dropFirst()
        guard values.count >= 8 else { return nil }
        return UInt64(values[values.startIndex + 7])
    }

    private func discover() -> (cgroup: CgroupCPU?, pressurePath: String?, pressureScope: String?) {
        let found = discovered.withLock { found in
            if let found { return found }
            let procSelfCgroup = readFile("/proc/self/cgroup")
            let mountinfo = readFile("/proc/self/mountinfo")
            let cgroup = CgroupCPU.discover(procSelfCgroup: procSelfCgroup, mountinfo: mountinfo, readFile: readFile)
            var pressure: String?
            // The cgroup's own pressure (v2), else the host's.
            if let group = procSelfCgroup.map(CgroupCPU.groups(procSelfCgroup:))?.v2,
               let mount = mountinfo.map(CgroupCPU.mounts(mountinfo:))?.v2,
               let directory = CgroupCPU.directory(group: group, mount: mount),
               readFile(directory + "/cpu.pressure").flatMap(Self.someTotal) != nil {
                pressure = directory + "/cpu.pressure"
            } else if readFile("/proc/pressure/cpu").flatMap(Self.someTotal) != nil {
                pressure = "/proc/pressure/cpu"
            }
            let result = Discovered(cgroup: cgroup, pressurePath: pressure)
            found = result
            return result
        }
        let scope = found.pressurePath.map { $0 == "/proc/pressure/cpu" ? "host" : "cgroup" }
        return (found.cgroup, found.pressurePath, scope)
    }
}
