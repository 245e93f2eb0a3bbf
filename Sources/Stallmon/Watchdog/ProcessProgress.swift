import CStallmonLoopShims
#if canImport(Glibc)
import Glibc
#endif

/// What the whole process did up to one instant, read by the watchdog on itself: the evidence a freeze is judged
/// from. A freeze (SIGSTOP, a debugger's stop, a cgroup freeze) stops every thread of the process: none runs, none
/// waits for a CPU, and every thread that sleeps is woken into the stop and sleeps again, each with a voluntary
/// context switch of its own (seen here: 7 sleeping threads, 14 switches across one SIGSTOP/SIGCONT). A watchdog that
/// is late for a reason of its own (blocked in a page fault, a log handler, a metrics backend, a lock) leaves the
/// other threads as they were.
struct ProcessProgress: Sendable, Equatable {
    /// How long the watchdog thread has waited for a CPU in all (its schedstat run_delay), ns.
    var watchdogRunDelay: UInt64
    /// CPU time of every thread of the process (CLOCK_PROCESS_CPUTIME_ID), ns.
    var processCPU: UInt64
    /// Voluntary context switches of every thread of the process, ended ones included (getrusage's ru_nvcsw).
    var voluntarySwitches: UInt64

    /// Now, from the calling (watchdog) thread; nil when any part cannot be read (no schedstat in this kernel, /proc
    /// denied): a freeze is then not judged.
    static func read(runDelay: @autoclosure () -> UInt64? = ThreadStats.ownRunDelay()) -> ProcessProgress? {
        // getrusage may be filtered (SystemCallFilter): then there is no evidence.
        guard cstallmon_syscall_verdict(Int32(CSTALLMON_SYSCALL_GETRUSAGE), nil) == Int32(CSTALLMON_SYSCALL_ALLOWED),
              let runDelay = runDelay() else { return nil }
        var cpu = timespec()
        guard clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu) == 0, cpu.tv_sec >= 0, cpu.tv_nsec >= 0 else { return nil }
        var usage = rusage()
        guard getrusage(RUSAGE_SELF.rawValue, &usage) == 0, usage.ru_nvcsw >= 0 else { return nil }
        let seconds = UInt64(cpu.tv_sec).multipliedReportingOverflow(by: 1_000_000_000)
        guard !seconds.overflow else { return nil }
        return ProcessProgress(watchdogRunDelay: runDelay, processCPU: seconds.partialValue &+ UInt64(cpu.tv_nsec),
                               voluntarySwitches: UInt64(usage.ru_nvcsw))
    }

    /// The CPUs online (1 at least): what the process's threads can run on at most.
    static func onlineCPUs() -> Int {
        max(1, sysconf(Int32(_SC_NPROCESSORS_ONLN)))
    }

    /// The number of threads of this process now (/proc/self/stat's num_threads), or nil.
    static func threadCount() -> Int? {
        guard let stat = ProcFile.read("/proc/self/stat"), let close = stat.lastIndex(of: ")") else { return nil }
        // Fields after the command's closing parenthesis: state is field 3, num_threads field 20.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 17, let threads = Int(fields[17]), threads > 0 else { return nil }
        return threads
    }
}

/// The freeze judgment: a pure decision over the evidence before and after one gap of the watchdog (a wake-up later
/// than asked for, or a pass that took long).
enum FreezeEvidence {
    /// Why a gap was or was not judged a freeze (tests and the log read it).
    enum Verdict: Equatable {
        case frozen
        /// Too short to judge (below the minimum).
        case tooShort
        /// Some evidence could not be read: not judged.
        case noEvidence
        /// The watchdog waited for a CPU for much of the gap: a loaded machine, not a freeze.
        case watchdogWaitedForACPU
        /// Some thread of the process ran for much of the gap.
        case processRan
        /// Fewer voluntary switches than threads: not every thread was stopped; the watchdog was late on its own.
        case threadsNotStopped
    }

    /// `before` and `after` the gap [expected, actual]; the readings span `window` (≥ the gap: a late wake-up's
    /// readings were taken before the sleep that ran into it, during which the process ran on up to `cpus` CPUs);
    /// `threads` the process's threads at its end.
    static func judge(expected: UInt64, actual: UInt64, window: UInt64, before: ProcessProgress?,
                      after: ProcessProgress?, threads: Int?, cpus: Int, minimum: UInt64) -> Verdict {
        guard actual > expected, actual - expected >= minimum else { return .tooShort }
        let gap = actual - expected
        guard let before, let after, let threads else { return .noEvidence }
        guard after.watchdogRunDelay &- before.watchdogRunDelay < gap / 2 else { return .watchdogWaitedForACPU }
        // What the threads may have run outside the gap, plus a quarter of the gap (the stop itself and the instants
        // around it cost each thread microseconds).
        let outside = UInt64(max(1, min(cpus, threads))).multipliedReportingOverflow(by: window &- min(window, gap))
        let sum = outside.partialValue.addingReportingOverflow(gap / 4)
        let allowance = outside.overflow || sum.overflow ? UInt64.max : sum.partialValue
        guard after.processCPU &- before.processCPU < allowance else { return .processRan }
        guard after.voluntarySwitches &- before.voluntarySwitches >= UInt64(threads) else { return .threadsNotStopped }
        return .frozen
    }
}
