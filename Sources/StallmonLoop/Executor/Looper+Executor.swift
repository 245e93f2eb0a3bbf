// The loop as a Swift Concurrency executor: an actor pinned to it, or a task that prefers it, runs on the loop
// thread, in its iterations, and so under the stall monitor.
//
//     actor Ledger {
//         let loop: Looper
//         nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }
//     }
//     Task(executorPreference: loop) { ... }
extension Looper: SerialExecutor, TaskExecutor {
    /// Queues `job` to run on the loop thread during the `beforeSources` phase of the next pass in any of the
    /// common modes, after the blocks and jobs queued before it. Its label in stall reports names the task's
    /// priority (`async` for tasks without one, `async high`, …). Safe from any thread; wakes the loop. Jobs
    /// queued while the loop does not run wait for its next `run`.
    public func enqueue(_ job: consuming ExecutorJob) {
        let label = Self.label(of: job.priority)
        enqueue(Job(label: label, modes: LooperMode.common.bit, work: .task(UnownedJob(job))))
    }

    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        UnownedSerialExecutor(complexEquality: self)
    }

    /// Two executors share an execution context when they are the same loop.
    public func isSameExclusiveExecutionContext(other: Looper) -> Bool {
        self === other
    }

    /// Traps unless called on the loop thread while it runs; lets `assumeIsolated` succeed in the loop's own
    /// callbacks (timers, sources, posted blocks), which run outside any Swift task.
    public func checkIsolated() {
        precondition(isOnLoopThread, "not on the thread of Looper \(name)")
    }

    /// True on the loop thread while it runs.
    public func isIsolatingCurrentContext() -> Bool? {
        isOnLoopThread
    }

    private static func label(of priority: JobPriority) -> LooperLabel {
        switch priority.rawValue {
        case 0: .asyncJob
        case ...TaskPriority.background.rawValue: .asyncBackground
        case ...TaskPriority.low.rawValue: .asyncLow
        case ...TaskPriority.medium.rawValue: .asyncMedium
        default: .asyncHigh
        }
    }
}

extension LooperLabel {
    /// Label of a Swift Concurrency job without a priority.
    public static let asyncJob = LooperLabel("async")
    /// Labels of Swift Concurrency jobs by priority.
    public static let asyncBackground = LooperLabel("async background")
    public static let asyncLow = LooperLabel("async low")
    public static let asyncMedium = LooperLabel("async medium")
    public static let asyncHigh = LooperLabel("async high")
}
