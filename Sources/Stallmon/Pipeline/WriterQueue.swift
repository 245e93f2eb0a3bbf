import CStallmonLoopShims
import Synchronization

/// The report writer's inbox: bounded, and a watchdog that submits never waits (a full queue refuses). It counts what
/// was accepted and handled, so `flush` can wait for everything accepted before it, and a watchdog can ask whether
/// one message was handled without waiting (`hasHandled`).
final class WriterQueue: Sendable {
    /// Room for a burst from many loops at once (16 loops × begin, interim and finish, with margin).
    static let limit = 1024

    private struct State {
        var messages: [(ReportWriter.Message, PipelineMember)] = []
        var stopping = false
        var accepted: UInt64 = 0
        /// Stalls whose `.finish` the full queue refused: the writer forgets what it kept for them (their rate-limit
        /// decision, their report's path), which only the finish would have cleared. Bounded like the queue.
        var abandoned: [String] = []
    }

    private let state = Mutex<State>(State())
    private let wakeSignal = WakeSignal()
    /// Signalled whenever the writer finished a batch, for `waitUntilHandled`.
    private let progress = MonotonicCondition()
    /// Messages handled so far (read under `progress`).
    nonisolated(unsafe) private var processed: UInt64 = 0
    /// The same count, for a watchdog that asks without waiting.
    private let handledCount = Atomic<UInt64>(0)

    /// Why the wake-up signal could not be created.
    var setupError: FileError? { wakeSignal.creationError }

    /// Queues `message`; never blocks. Returns its place in the queue's order, or nil when the queue is full or
    /// stopping (a refused `.finish` is remembered as abandoned).
    func submit(_ message: ReportWriter.Message, from client: PipelineMember) -> UInt64? {
        let ticket = state.withLock { state -> UInt64? in
            guard state.messages.count < Self.limit, !state.stopping else {
                if case .finish(let snapshot) = message, state.abandoned.count < Self.limit {
                    state.abandoned.append(snapshot.id)
                }
                return nil
            }
            state.messages.append((message, client))
            state.accepted += 1
            return state.accepted
        }
        if ticket != nil { wakeSignal.wake() }
        return ticket
    }

    /// On the writer thread: waits for messages (or until `deadline`, nil: for ever) and takes them all.
    func take(waitingUntil deadline: UInt64?)
        -> (batch: [(ReportWriter.Message, PipelineMember)], abandoned: [String], stopping: Bool) {
        wakeSignal.wait(until: deadline)
        return state.withLock { state in
            defer {
                state.messages.removeAll(keepingCapacity: true)
                state.abandoned.removeAll()
            }
            return (state.messages, state.abandoned, state.stopping)
        }
    }

    /// On the writer thread: `count` more messages were handled.
    func handled(_ count: Int) {
        progress.lock()
        processed += UInt64(count)
        handledCount.store(processed, ordering: .releasing)
        progress.broadcast()
        progress.unlock()
    }

    var isEmpty: Bool { state.withLock { $0.messages.isEmpty } }

    /// Refuses new messages from now on and wakes the writer to finish.
    func stop() {
        state.withLock { $0.stopping = true }
        wakeSignal.wake()
    }

    /// Whether the message at `ticket` was handled. Never blocks for long (an atomic load).
    func hasHandled(_ ticket: UInt64) -> Bool {
        handledCount.load(ordering: .acquiring) >= ticket
    }

    /// Waits until every message accepted before the call was handled, `isRunning` says the writer is gone, or
    /// `timeout` passed: how many were not handled yet.
    func waitUntilHandled(timeout: Duration, isRunning: () -> Bool) -> UInt64 {
        let target = state.withLock { $0.accepted }
        wakeSignal.wake()
        let deadline = cstallmon_monotonic_ns() &+ UInt64(clamping: max(0, timeout.nanosecondsClamped))
        progress.lock()
        defer { progress.unlock() }
        while processed < target {
            if !progress.wait(until: min(deadline, cstallmon_monotonic_ns() + 1_000_000_000)) {
                if !isRunning() { return 0 }
                if cstallmon_monotonic_ns() >= deadline { return target - processed }
            }
        }
        return 0
    }
}
