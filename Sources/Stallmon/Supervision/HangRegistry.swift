import Synchronization

/// The process's stalls in progress, across every monitor, for systemd's watchdog (`SystemdNotifier`): which loop,
/// since when, and whether one passed its monitor's `systemd_hang_after_ms` with its report durable. Written by
/// the watchdog thread at a stall's begin, hang and end, and by the report writer (the top frame); never per iteration
/// and never by a loop thread or pool worker.
final class HangRegistry: Sendable {

    struct Entry: Sendable, Equatable {
        var loop: String
        /// CLOCK_MONOTONIC ns when the stalled iteration or job began.
        var since: UInt64
        /// Set once the stall passed `systemd_hang_after_ms` and its report was durable.
        var hung = false
        /// The report's top frame (`Foo.bar() (File.swift:12)`), once a report of the stall was written.
        var topFrame: String?
    }

    private let entries = Mutex<[String: Entry]>([:])

    func began(id: String, loop: String, since: UInt64) {
        entries.withLock { $0[id] = Entry(loop: loop, since: since) }
    }

    func markHung(id: String) {
        entries.withLock { $0[id]?.hung = true }
    }

    func noteTopFrame(id: String, topFrame: String?) {
        guard let topFrame else { return }
        entries.withLock { $0[id]?.topFrame = topFrame }
    }

    func ended(id: String) {
        _ = entries.withLock { $0.removeValue(forKey: id) }
    }

    /// The longest-stalled of the hung stalls, or nil while none is.
    func oldestHung() -> Entry? {
        entries.withLock { entries in entries.values.filter(\.hung).min { $0.since < $1.since } }
    }
}
