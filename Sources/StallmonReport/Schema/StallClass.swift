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
