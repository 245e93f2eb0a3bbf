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
        guard let schedstat = ProcFile.read("/proc/self/task/\(tid)/schedstat") else { return nil }
        let fields = schedstat.split(separator: " ")
        guard fields.count >= 2, let cpu = UInt64(fields[0]), let delay = UInt64(fields[1]) else { return nil }
        var stats = ThreadStats(cpuNanoseconds: cpu, runDelayNanoseconds: delay, voluntarySwitches: 0,
                                involuntarySwitches: 0)
        if let status = ProcFile.read("/proc/self/task/\(tid)/status") {
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
        guard let stat = ProcFile.read("/proc/self/task/\(tid)/stat"),
              let close = stat.lastIndex(of: ")") else { return nil }
        return stat[stat.index(after: close)...].first { !$0.isWhitespace }
    }

    /// The calling thread's run delay, ns (to tell a starved watchdog from a frozen process).
    static func ownRunDelay() -> UInt64? {
        guard let schedstat = ProcFile.read("/proc/thread-self/schedstat") else { return nil }
        return runDelay(schedstat: schedstat)
    }

    /// The second field of a schedstat line.
    static func runDelay(schedstat: String) -> UInt64? {
        let fields = schedstat.split(separator: " ")
        return fields.count >= 2 ? UInt64(fields[1]) : nil
    }
}

/// The calling thread's schedstat, opened once and read with one `pread` each time: the watchdog reads it twice
/// per pass. Owned by the thread that made it (`/proc/thread-self` is resolved at open); closed with it.
final class OwnSchedstat {
    private var fd: Int32
    private var buffer = [UInt8](repeating: 0, count: 128)

    init() {
        fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC)
    }

    deinit {
        if fd >= 0 { close(fd) }
    }

    /// The thread's run delay (ns), or nil when the file could not be opened or read.
    func runDelay() -> UInt64? {
        // Opened again while it could not be (EMFILE at start): the freeze evidence comes back with it.
        if fd < 0 { fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC) }
        guard fd >= 0 else { return nil }
        var count: Int
        repeat {
            count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        } while count < 0 && errno == EINTR
        guard count > 0 else { return nil }
        return Self.secondField(buffer[0..<count])
    }

    /// The second decimal field of `cpu run_delay slices`, read from the bytes (no string made each pass).
    static func secondField(_ bytes: ArraySlice<UInt8>) -> UInt64? {
        var field = 0
        var value: UInt64 = 0
        var digits = 0
        for byte in bytes {
            if byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") {
                guard field == 1 else { continue }
                let next = value.multipliedReportingOverflow(by: 10)
                guard !next.overflow else { return nil }
                let sum = next.partialValue.addingReportingOverflow(UInt64(byte - UInt8(ascii: "0")))
                guard !sum.overflow else { return nil }
                value = sum.partialValue
                digits += 1
            } else if byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\n") {
                if field == 1 { break }
                field += 1
            } else {
                return nil
            }
        }
        return field == 1 && digits > 0 ? value : nil
    }
}
