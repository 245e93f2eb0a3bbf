import CStallmonConcurrency
import Logging

/// An actor's drain job runs the jobs of the tasks queued on the actor, one after another, so its probe names no task:
/// labels and await chains there are read from the task the runtime marks active on the worker's thread
/// (`current_task.c`). Where that mark lies, and that a drain resumes a task with the call the await-chain check
/// found, is no public interface of Swift 6.3: once per process this check finds the mark in a task, confirms it on a
/// plain thread and in a real drain job, and reads a chain there. Until it passed, and if it fails, drain jobs get no
/// label and no chain (a notice says so).
enum ActorDrainCheck {
    /// Tries a few times: the method may not resume in a drain job (say, every probe was taken).
    private static let attempts = 5

    /// Runs once, after `AwaitChain`'s check (whose resume call a drain must match).
    static func run(logger: Logger) async {
        var found: Int32 = 0
        // The loader's lock (the runtime's block) is taken off the pool; the search itself must run in the task.
        if await onAPlainThread({ cstallmon_current_task_locate_block() == 1 }),
           cstallmon_current_task_find(RunningTask.address) > 0,
           await onAPlainThread({ cstallmon_current_task_confirm(0) > 0 }) {
            for _ in 0..<attempts where found == 0 {
                // Another task than the one that found the candidates: a stray copy of this task would not follow.
                found = await Task { await DrainedActor().resumeInDrain() }.value
            }
        }
        let activeTask = found & CSTALLMON_DRAIN_ACTIVE_TASK != 0
        let chains = found & CSTALLMON_DRAIN_CHAIN != 0
        cstallmon_current_task_set_verdict(activeTask ? 1 : 0)
        cstallmon_concurrency_set_drain_chains(chains ? 1 : 0)
        if !activeTask || (!chains && cstallmon_concurrency_await_chain_layout() == 1) {
            let missing = activeTask ? "await chain" : "label or await chain (nor async code on a loop an await chain)"
            logger.notice("""
                stallmon: code an actor's drain job runs gets no \(missing) on this Swift runtime (the running task \
                is not where this build looks for it)
                """)
        }
    }

    /// `body` on a new thread, which runs no task. Awaited, not joined: a join would hold this worker for as long as
    /// the system takes to run that thread, a stall of stallmon's own making on a loaded machine.
    private static func onAPlainThread(_ body: @escaping @Sendable () -> Bool) async -> Bool {
        await withCheckedContinuation { continuation in
            let thread = PosixThread.start(name: "stallmon-check") { continuation.resume(returning: body()) }
            guard let thread else { return continuation.resume(returning: false) }
            thread.detach()
        }
    }

    /// An actor whose method starts a task from its own code: the new task is enqueued on the actor, busy with the
    /// method, and runs once the method suspends, in the actor's drain job.
    private actor DrainedActor {
        func resumeInDrain() async -> Int32 {
            await Task { self.check() }.value
        }

        @inline(never)
        private func check() -> Int32 {
            cstallmon_concurrency_drain_check(RunningTask.address)
        }
    }
}

/// The running task's address, as the runtime's structures hold it (0 outside a task).
enum RunningTask {
    static var address: UInt {
        withUnsafeCurrentTask { task in task.map { unsafeBitCast($0, to: UInt.self) } } ?? 0
    }
}
