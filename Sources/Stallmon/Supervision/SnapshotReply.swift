import Dispatch
import Synchronization

/// Where a snapshot's writer puts its outcome, for the control socket's thread that waits for it.
final class SnapshotReply: Sendable {
    enum Outcome: Sendable {
        case success(String)
        case failure(String)
    }

    private let outcome = Mutex<Outcome?>(nil)
    private let done = DispatchSemaphore(value: 0)

    func finish(_ result: Outcome) {
        outcome.withLock { $0 = result }
        done.signal()
    }

    /// Waits up to `timeout`; nil when the writer did not answer in time.
    func wait(timeout: Duration) -> Outcome? {
        guard done.wait(timeout: .now() + .nanoseconds(Int(timeout.nanosecondsClamped))) == .success else { return nil }
        return outcome.withLock { $0 }
    }
}
