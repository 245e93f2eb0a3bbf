/// How one capture of the loop thread's stack went.
public enum CaptureStatus: String, Codable, Sendable {
    case ok
    /// The handler did not finish within `capture_timeout_ms`; the thread is not signalled again until it has.
    case timedOut = "timed-out"
    /// An earlier signal may still be pending on the thread, so no new one was sent.
    case pending
    /// The signal could not be delivered (the thread is gone).
    case signalFailed = "signal-failed"
    /// The handler ran but libunwind could not start from the interrupted context.
    case unwindFailed = "unwind-failed"
    case notReady = "not-ready"
    /// The thread was inside the dynamic loader, whose lock the unwinder needs: skipped to avoid a deadlock.
    case inLoader = "in-loader"
}
