/// Why the loop stalled, from where the thread's time went during the stall.
public enum StallClass: String, Codable, Sendable, CaseIterable {
    /// Mostly on a CPU: the loop was computing.
    case cpu
    /// Mostly asleep: waiting on I/O, a lock, a sleep.
    case blocked
    /// Mostly runnable but not running, and not because of a CPU limit: other threads of the process, other
    /// processes (noisy neighbours), the hypervisor (see the report's `cpuContention.stealMs`).
    case starved
    /// Mostly runnable but not running because the cgroup's CPU limit was used up: the limit's throttling can have
    /// withheld the CPU for at least half of the thread's wait for one (an upper bound, see ReadingAStall).
    case throttled
    /// Not enough evidence (the thread's figures could not be read).
    case unknown

    /// A class this version does not know (written by a newer one) reads as `unknown`, not as a broken report.
    public init(from decoder: any Decoder) throws {
        self = StallClass(rawValue: try decoder.singleValueContainer().decode(String.self)) ?? .unknown
    }
}
