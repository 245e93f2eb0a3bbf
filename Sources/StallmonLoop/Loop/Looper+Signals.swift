import CStallmonLoopShims
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Process signals (`SIGTERM`, `SIGINT`, `SIGHUP`, …) handled on a loop: a signalfd read by the loop, so the handler is
/// ordinary code on the loop thread, not a signal handler. Cancel it to stop handling them (the signals stay blocked
/// in the threads that blocked them).
public final class LooperSignalSource: Sendable {
    /// The signalfd; closed by `cancel()`.
    public let fileDescriptor: Int32
    private let source: LooperFDSource
    private weak let loop: Looper?
    /// Set by the one `cancel()` that closes the descriptor.
    private let closed = Atomic<Bool>(false)

    init(fileDescriptor: Int32, source: LooperFDSource, loop: Looper) {
        self.fileDescriptor = fileDescriptor
        self.source = source
        self.loop = loop
    }

    /// Unregisters the source and closes its descriptor. Safe from any thread, any number of times: the descriptor is
    /// closed once.
    public func cancel() {
        // An exchange, not a look at `source.isValid`: two callers could both see the source valid and both close, and
        // the second close would hit whatever descriptor took the number in between.
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        source.cancel()
        let descriptor = fileDescriptor
        // The loop unregisters the descriptor through its queue: close it after that, in the same order.
        if let loop { loop.perform(label: .internal) { _ = close(descriptor) } } else { _ = close(descriptor) }
    }
}

extension Looper {
    /// Calls `handler` on the loop thread with the signal's number whenever the process receives one of `signals`
    /// (e.g. `[SIGTERM, SIGINT]` to stop the loop, then the monitor, for a graceful shutdown).
    ///
    /// The signals are blocked in the calling thread (a signalfd only sees signals that are blocked), and threads
    /// created afterwards inherit that. Call it first thing in `main`, before any other thread starts (the monitor's
    /// included): a thread that does not block them would take the signal's default action instead, which for
    /// `SIGTERM` ends the process without draining.
    @discardableResult
    public func addSignalHandler(for signals: [Int32], label: LooperLabel = LooperLabel("signal"),
                                 _ handler: @escaping @Sendable (Int32) -> Void) throws(LooperError) -> LooperSignalSource {
        let descriptor = signals.withUnsafeBufferPointer { cstallmon_signalfd_open($0.baseAddress, Int32($0.count)) }
        guard descriptor >= 0 else {
            throw LooperError(description: "signalfd for signals \(signals) failed: \(String(cString: strerror(errno)))")
        }
        let source = addReader(descriptor, label: label) {
            while true {
                let signal = cstallmon_signalfd_take(descriptor)
                guard signal > 0 else { return }
                handler(signal)
            }
        }
        return LooperSignalSource(fileDescriptor: descriptor, source: source, loop: self)
    }
}
