#if canImport(Glibc)
import Glibc
#endif

/// Scheduler figures of one thread, from /proc/self/task/TID/{schedstat,status,stat}. Read by the watchdog, never
/// on the loop thread.
struct ThreadStats: Sendable, Equatable {
    /// Time on a CPU (schedstat sum_exec_runtime), ns.
    var cpuNanoseconds: UInt64
    /// Time runnable but waiting for a CPU (schedstat run_delay), ns.
    var runDelayNanoseconds: UInt64
    var voluntarySwitches: UInt64
    var involuntarySwitches: UInt64

    /// Reads the thread's figures, or nil when the thread is gone or /proc lacks schedstat.
    static func read(tid: Int32) -> ThreadStats? {
        guard let schedstat = readSmallFile("/proc/self/task/\(tid)/schedstat") else { return nil }
        let fields = schedstat.split(separator: " ")
        guard fields.count >= 2, let cpu = UInt64(fields[0]), let delay = UInt64(fields[1]) else { return nil }
        var stats = ThreadStats(cpuNanoseconds: cpu, runDelayNanoseconds: delay, voluntarySwitches: 0,
                                involuntarySwitches: 0)
        if let status = readSmallFile("/proc/self/task/\(tid)/status") {
            for line in status.split(separator: "\n") {
                if line.hasPrefix("voluntary_ctxt_switches:") {
                    stats.voluntarySwitches = UInt64(line.split(separator: "\t").last ?? "") ?? 0
                } else if line.hasPrefix("nonvoluntary_ctxt_switches:") {
                    stats.involuntarySwitches = UInt64(line.split(separator: "\t").last ?? "") ?? 0
                }
            }
        }
        return stats
    }

    /// The thread's state letter (R running/runnable, S sleeping, D uninterruptible, T stopped, …), or nil.
    static func state(tid: Int32) -> Character? {
        guard let stat = readSmallFile("/proc/self/task/\(tid)/stat"),
              let close = stat.lastIndex(of: ")") else { return nil }
        return stat[stat.index(after: close)...].first { !$0.isWhitespace }
    }

    /// The calling thread's run delay, ns (to tell a starved watchdog from a frozen process).
    static func ownRunDelay() -> UInt64? {
        guard let schedstat = readSmallFile("/proc/thread-self/schedstat") else { return nil }
        let fields = schedstat.split(separator: " ")
        return fields.count >= 2 ? UInt64(fields[1]) : nil
    }

    /// /proc files are small and report size 0, so read until EOF into a stack-sized buffer.
    private static func readSmallFile(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: 2048)
        var total = 0
        while total < bytes.count {
            let got = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + total, $0.count - total) }
            if got < 0 && errno == EINTR { continue }
            if got <= 0 { break }
            total += got
        }
        return String(decoding: bytes[0..<total], as: UTF8.self)
    }
}

/// Why the loop stalled, from where the thread's time went during the stall.
public enum StallClass: String, Codable, Sendable, CaseIterable {
    /// Mostly on a CPU: the loop was computing.
    case cpu
    /// Mostly asleep: waiting on I/O, a lock, a sleep.
    case blocked
    /// Mostly runnable but not running: CPU quota throttling, noisy neighbours, too many threads.
    case starved
    /// Not enough evidence (the thread's figures could not be read).
    case unknown
}

enum StallClassifier {
    /// Splits `wall` nanoseconds of a stall into on-CPU, waiting for a CPU, and the rest (sleeping or blocked),
    /// and names the largest share.
    static func classify(cpu: UInt64, runDelay: UInt64, wall: UInt64) -> StallClass {
        guard wall > 0 else { return .unknown }
        let sleeping = wall > cpu + runDelay ? wall - cpu - runDelay : 0
        if cpu >= runDelay && cpu >= sleeping { return .cpu }
        if runDelay >= sleeping { return .starved }
        return .blocked
    }
}

/// Intervals during which the whole process did not run (SIGSTOP, a debugger, a VM or container freeze): the
/// watchdog saw its own sleep overrun without having waited for a CPU. Stall durations exclude them.
struct FreezeTracker: Sendable {
    private(set) var intervals: [(start: UInt64, end: UInt64)] = []
    private(set) var count = 0
    private(set) var totalNanoseconds: UInt64 = 0

    /// Records that the watchdog meant to wake at `expected` but ran only at `actual`, its run delay having grown by
    /// `runDelayGrowth` meanwhile. An overrun of at least `minimum` not explained by waiting for a CPU is a freeze.
    /// Returns true when it recorded one.
    @discardableResult
    mutating func observeWake(expected: UInt64, actual: UInt64, runDelayGrowth: UInt64, minimum: UInt64) -> Bool {
        guard actual > expected else { return false }
        let overrun = actual - expected
        guard overrun >= minimum, runDelayGrowth < overrun / 2 else { return false }
        intervals.append((expected, actual))
        if intervals.count > 64 { intervals.removeFirst(intervals.count - 64) }
        count += 1
        totalNanoseconds += overrun
        return true
    }

    /// Frozen time inside [start, end].
    func overlap(start: UInt64, end: UInt64) -> UInt64 {
        intervals.reduce(0) { sum, interval in
            let low = max(start, interval.start)
            let high = min(end, interval.end)
            return high > low ? sum + (high - low) : sum
        }
    }
}
