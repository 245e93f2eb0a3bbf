import CStallmonCapture
import CStallmonConcurrency
import Logging
import Synchronization

/// The async functions that awaited the job a worker runs now, up to its task's root: in async code the thread's own
/// stack ends where the job began, and the awaiting callers live only as the task's async contexts. Read on the
/// watchdog thread (`cstallmon_worker_await_chain`), never by the worker, and only once the runtime's layout was
/// checked (`checkLayout`).
package struct AwaitChain: Sendable, Equatable {
    /// Resume points a chain holds at most; a longer one is cut, its outermost callers dropped.
    package static let maxResumePoints = Int(CSTALLMON_MAX_AWAIT_FRAMES)

    /// Innermost first: where each awaiting function resumes (the entry of its partial function, not a return
    /// address), ending with the task's root.
    var resumePoints: [UInt]
    /// The chain was longer than `CSTALLMON_MAX_AWAIT_FRAMES`: its outermost callers were dropped.
    var truncated: Bool
    /// The index, in the sample's frames, of the async function's frame the chain continues.
    var attachedFrame: Int

    /// The chain of the job `reading` shows running, from the context the handler found below its first frame:
    /// nil when it ended, that function returned, or (in an actor's drain job) the drain moved on to another task
    /// before the chain was read, or when the layout checks have not passed.
    static func of(_ reading: WorkerReading, jobFrame: StackCapturer.JobFrame, activeTask: UInt,
                   activeTaskJobId: UInt32) -> AwaitChain? {
        guard reading.isRunningJob else { return nil }
        return read(attachedTo: jobFrame) { buffer, capacity, truncated in
            cstallmon_worker_await_chain(reading.index, reading.jobSequence, jobFrame.context, jobFrame.framePointer,
                                         activeTask, activeTaskJobId, buffer, capacity, truncated)
        }
    }

    /// The chain of the task a loop thread (`thread`, its pthread_self()) ran when `sample` stopped it: nil when it
    /// ran none, moved on before the chain was read, or the checks at start have not passed.
    static func of(_ sample: RawSample, onThread thread: UInt, jobFrame: StackCapturer.JobFrame) -> AwaitChain? {
        guard sample.activeTask != 0 else { return nil }
        return read(attachedTo: jobFrame) { buffer, capacity, truncated in
            cstallmon_thread_await_chain(thread, sample.activeTask, sample.activeTaskJobId, jobFrame.context,
                                         jobFrame.framePointer, buffer, capacity, truncated)
        }
    }

    /// Up to `maxResumePoints` resume points from `reader` (one of the C side's chain readers: the count it read, or
    /// 0 or less for none), attached to `jobFrame`.
    private static func read(
        attachedTo jobFrame: StackCapturer.JobFrame,
        _ reader: (UnsafeMutablePointer<UInt>?, UInt32, UnsafeMutablePointer<UInt32>) -> Int32
    ) -> AwaitChain? {
        let capacity = Self.maxResumePoints
        var truncated: UInt32 = 0
        var read: Int32 = -1
        let resumePoints = [UInt](unsafeUninitializedCapacity: capacity) { buffer, count in
            read = reader(buffer.baseAddress, UInt32(capacity), &truncated)
            count = max(0, Int(read))
        }
        guard read > 0 else { return nil }
        return AwaitChain(resumePoints: resumePoints, truncated: truncated != 0, attachedFrame: jobFrame.index)
    }

    private static let layoutChecked = Atomic<Bool>(false)

    /// The contexts are read where Swift 6.3's runtime keeps them on 64-bit Linux, which is no public interface:
    /// once per process, a task awaits through two functions of this file, each of which tells the C side where it
    /// runs, and chains are read only if the contexts gave exactly those resume points. Otherwise a notice, and
    /// stacks end where the job began, as before.
    static func checkLayout(logger: Logger) {
        guard !layoutChecked.exchange(true, ordering: .acquiringAndReleasing) else { return }
        _ = SystemCallFilter.allowsOwnMemoryReads  // as `StallLabel.checkLayout`: its reads need the verdict
        Task.detached(priority: .background) {
            var runnerStart: UInt = 0
            var runnerEnd: UInt = 0
            var resumeCall: UInt = 0
            if await LayoutCheck.outer() == 1,
               cstallmon_concurrency_await_frames(&runnerStart, &runnerEnd, &resumeCall) {
                cstallmon_set_async_job_frames(runnerStart, runnerEnd, resumeCall)
            } else {
                logger.notice("""
                    stallmon: await chains are not read on this Swift runtime (a task's async contexts are not \
                    where this build looks for them); async stall stacks end where the job began
                    """)
            }
            // Second, as it needs the resume call the first found.
            await ActorDrainCheck.run(logger: logger)
        }
    }

    /// The check's two functions: `outer` awaits `inner`, which suspends for real before it reports its place.
    private enum LayoutCheck {
        @inline(never)
        static func outer() async -> Int32 {
            await inner()
            return cstallmon_concurrency_await_check_outer()
        }

        @inline(never)
        static func inner() async {
            try? await Task.sleep(nanoseconds: 1_000_000)
            cstallmon_concurrency_await_check_inner(RunningTask.address)
        }
    }
}

extension StackCapturer {
    /// One sample of a worker running the job `reading` shows, with that job's await chain when it still runs.
    func capture(labelID: UInt32, jobOf reading: WorkerReading?) -> RawSample {
        guard let reading else { return capture(labelID: labelID) }
        // The active task and its job id, as the handler finds them while the worker is held: in a drain, the task it
        // runs; in a task's job, the job's own task, whose id tells after the chain's reads that it was not reused.
        let activeTask = cstallmon_worker_active_task_address(reading.index)
        var (sample, jobFrame) = capture(
            labelID: labelID, framePointers: framePointerBuffer,
            activeTask: activeTask == 0 ? nil : (activeTask, UInt(CSTALLMON_TASK_JOB_ID_OFFSET)))
        if sample.status == .ok, let jobFrame {
            sample.awaitChain = AwaitChain.of(reading, jobFrame: jobFrame, activeTask: sample.activeTask,
                                              activeTaskJobId: sample.activeTaskJobId)
        }
        // The job may have ended between the watchdog's reading and the signal (a starvation's culprit a moment
        // from its end; two long jobs back to back, which keep no exact end of the first): a stack taken then is
        // the next job's. Checked after the capture, so a sample of a job that ended just after it is left out
        // too: at most one sample at a job's end lost, never another job's stack kept.
        if sample.status == .ok, WorkerReading.read(index: reading.index).map({ $0.isSameJob(as: reading) }) != true {
            sample.afterJobEnded = true
            sample.awaitChain = nil
        }
        return sample
    }

    /// One sample of a loop thread (a `Looper`, an event loop; `thread` is its pthread_self(), 0 when unknown), with
    /// the await chain of the task whose job it runs when it runs one: async code the loop's executor runs. Frame
    /// pointers (a slower unwind) only when the thread runs a task as the capture begins.
    func capture(labelID: UInt32, loopThread thread: UInt) -> RawSample {
        let activeTask = cstallmon_thread_active_task_address(thread)
        guard activeTask != 0, cstallmon_thread_active_task(thread) != 0 else { return capture(labelID: labelID) }
        var (sample, jobFrame) = capture(labelID: labelID, framePointers: framePointerBuffer,
                                         activeTask: (activeTask, UInt(CSTALLMON_TASK_JOB_ID_OFFSET)))
        if sample.status == .ok, let jobFrame {
            sample.awaitChain = AwaitChain.of(sample, onThread: thread, jobFrame: jobFrame)
        }
        return sample
    }
}
