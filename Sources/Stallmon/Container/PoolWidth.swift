import CStallmonMeasure
#if canImport(Glibc)
import Glibc
#endif

/// How many workers Swift Concurrency's global pool runs at once per priority on Linux, against the CPU limit.
///
/// The pool is libdispatch's: its width is `dispatch_hw_config(active_cpus)`, the CPUs in the thread's affinity
/// mask, or `_SC_NPROCESSORS_ONLN` when the mask cannot be read (swift-corelibs-libdispatch `src/shims/hw_config.h`,
/// `src/queue.c`'s `_dispatch_root_queue_init_pthread_pool`). It never reads the cgroup's CPU limit, so 64 workers
/// run under a 2-CPU limit, and their bursts use up the quota for the whole process. (SwiftNIO's
/// `System.coreCount` does read the limit.) The only narrowing knob is the affinity mask or cpuset.
enum PoolWidth {
    /// The pool's width as read once, at the first use (the pool monitor's first watchdog pass): libdispatch fixes
    /// its own at its start, so a later change of the affinity (`taskset -p`) does not narrow a pool already made.
    static let atStart = current()

    /// The pool's width for this process now, as libdispatch computes it.
    static func current() -> Int {
        let count = Int(cstallmon_affinity_cpu_count())
        return count > 0 ? count : max(1, sysconf(Int32(_SC_NPROCESSORS_ONLN)))
    }

    /// The one log line a pool wider than the limit deserves, or nil when it is not wider (a limit of 1.5 CPUs
    /// runs 2 workers in parallel without waiting).
    static func warning(width: Int, limit: CgroupCPU.Limit) -> String? {
        guard Double(width) > limit.cpus.rounded(.up) else { return nil }
        return "the Swift Concurrency pool runs up to \(width) workers at once (one per CPU this process may use: "
            + "libdispatch does not read the CPU limit), but the cgroup's CPU limit is "
            + "\(cpus(limit.cpus)) CPU: bursts of the pool use up the quota and the whole process is throttled "
            + "until the next period. Narrow the CPUs the process may use to the limit (a cpuset: Kubernetes' static "
            + "CPU manager, docker --cpuset-cpus, taskset) or raise the limit."
    }

    /// `0.2`, `2`, `1.5`: at most three decimals, no trailing zeros.
    static func cpus(_ value: Double) -> String {
        let rounded = (value * 1000).rounded() / 1000
        return rounded == rounded.rounded() && abs(rounded) < 1e9 ? String(Int(rounded)) : String(rounded)
    }
}
