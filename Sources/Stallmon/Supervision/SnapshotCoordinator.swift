import CStallmonCapture
import CStallmonLoopShims
import Foundation
import StallmonReport
import Synchronization

/// A snapshot on demand: the process's watchdog thread (`Watchdog.process`, woken at once) contributes what every
/// loop and pool it watches is doing, each with a stack sample taken with that source's capture slots. The control
/// socket's thread (`ControlSocket`) asks, waits for it (bounded), and hands the parts to the report writer.
final class SnapshotCoordinator: Sendable {

    /// One loop, worker or pool, as the watchdog saw it.
    struct Part: Sendable {
        var name: String
        var kind: String
        var tid: Int32?
        /// CLOCK_MONOTONIC ns the current iteration or job began; nil when idle.
        var busySince: UInt64?
        /// A `Looper` label id (0: none), or a task's label (`StallLabel`, with its trace ids).
        var labelID: UInt32 = 0
        var taskLabel: TaskLabel?
        var job: StallReport.Job?
        var sample: RawSample?
        var note: String?
    }

    private struct State {
        var participants: [ObjectIdentifier: StoppableThread] = [:]
        var expected: Set<ObjectIdentifier> = []
        var parts: [Part] = []
        var collecting = false
    }

    private let state = Mutex<State>(State())
    /// The request being answered (0: none yet); the watchdog compares it with the last it answered, once per pass.
    private let requested = Atomic<UInt64>(0)
    /// Monotonic: a wall clock stepped back would unbound `collect`, and so `stop()`.
    private let progress = MonotonicCondition()
    /// One request at a time in the process (several report directories each have a control socket).
    private let requestLock = Mutex<Void>(())

    /// A watchdog that will answer requests (from its start until `leave`).
    func join(_ identity: ObjectIdentifier, runner: StoppableThread) {
        state.withLock { _ = $0.participants.updateValue(runner, forKey: identity) }
    }

    func leave(_ identity: ObjectIdentifier) {
        state.withLock { state in
            state.participants[identity] = nil
            state.expected.remove(identity)
        }
        signalProgress()
    }

    /// On a watchdog's pass: the request to answer, if one came since `answered`.
    func pending(after answered: UInt64) -> UInt64? {
        let current = requested.load(ordering: .acquiring)
        return current > answered ? current : nil
    }

    /// A watchdog's answer to request `generation`.
    func contribute(_ identity: ObjectIdentifier, generation: UInt64, parts: [Part]) {
        state.withLock { state in
            guard state.collecting, requested.load(ordering: .relaxed) == generation,
                  state.expected.remove(identity) != nil else { return }
            state.parts += parts
        }
        signalProgress()
    }

    /// Asks every watchdog and waits until all answered or `timeout` passed. Returns the parts, and how many
    /// watchdogs did not answer in time. One request at a time in the process; another waits its turn.
    func collect(timeout: Duration) -> (parts: [Part], missing: Int) {
        requestLock.withLock { _ in collectAlone(timeout: timeout) }
    }

    private func collectAlone(timeout: Duration) -> (parts: [Part], missing: Int) {
        let runners: [StoppableThread] = state.withLock { state in
            state.parts = []
            state.expected = Set(state.participants.keys)
            state.collecting = true
            requested.wrappingAdd(1, ordering: .releasing)
            return Array(state.participants.values)
        }
        for runner in runners { runner.wake() }
        let deadline = cstallmon_monotonic_ns() &+ UInt64(clamping: max(0, timeout.nanosecondsClamped))
        progress.lock()
        while state.withLock({ !$0.expected.isEmpty }) && cstallmon_monotonic_ns() < deadline {
            progress.wait(until: min(deadline, cstallmon_monotonic_ns() + 50_000_000))
        }
        progress.unlock()
        return state.withLock { state in
            state.collecting = false
            defer { state.expected = [] }
            return (state.parts, state.expected.count)
        }
    }

    private func signalProgress() {
        progress.lock()
        progress.broadcast()
        progress.unlock()
    }
}
