import ArgumentParser
import CStallmonCapture
import CStallmonConcurrency
import CStallmonConcurrencyTesting
import CStallmonLoopShims
import Foundation
import Stallmon
import Synchronization

/// What the await chain adds to a sample of an async job: the handler records each frame's frame pointer (a pool
/// worker's capture steps frame by frame anyway), and the watchdog follows the task's contexts. Measured on a real
/// task stalled on a global-executor worker under `depth` awaiting functions, each suspended once.
struct AwaitChainCost {
    let quick: Bool
    let depth = 8

    func run(_ results: Results) throws {
        // The executor's hooks (the chain is found from its job runner's frame) and the layout check; a threshold no
        // job reaches. One monitor at a time in a process: stopped before the next section's. Its settings are the
        // defaults: the hooks' statistics switch is process-wide, and section 8 measures the default first (a first
        // version of this monitor with `pool_statistics = off` made section 8's "on" figure that of "off").
        var configuration = StallMonitorConfiguration(
            detection: .init(threshold: .seconds(10)), reports: .init(directory: NSTemporaryDirectory() + "stallmon-bench-chain"))
        configuration.detection.interimAfter = .seconds(20)
        let monitor = try ConcurrencyStallMonitor(configuration: configuration, mainActor: false)
        monitor.start()
        defer { monitor.stop() }
        let checked = nowNanoseconds() + 2_000_000_000
        while cstallmon_concurrency_drain_chains() == 0 && nowNanoseconds() < checked { usleep(1000) }
        let job = StalledJob()
        Task.detached { await AwaitingLayers.layer(depth, job) }
        let deadline = nowNanoseconds() + 5_000_000_000
        while job.tid.load(ordering: .acquiring) == 0 && nowNanoseconds() < deadline { usleep(1000) }
        defer { job.stop.store(true, ordering: .releasing) }
        let slot = cstallmon_slot_acquire(job.tid.load(ordering: .acquiring))
        guard slot >= 0 else { throw ValidationError("no capture slot for the stalled job") }
        defer { cstallmon_slot_release(slot) }
        let task = job.task.load(ordering: .acquiring)
        var frames = [UInt](repeating: 0, count: 256)
        var framePointers = [UInt](repeating: 0, count: 256)
        var chain = [UInt](repeating: 0, count: AwaitChain.maxResumePoints)
        var plainPauses: [Double] = []
        var pointerPauses: [Double] = []
        var reads: [Double] = []
        var lengths: [Double] = []
        // As a capture of an actor's drain job or a loop thread: the handler also reads the thread's active task and
        // its id, and the chain is checked against that task afterwards.
        let thread = job.thread.load(ordering: .relaxed)
        let activeTaskAt = cstallmon_thread_active_task_address(thread)
        var recordingPauses: [Double] = []
        var threadReads: [Double] = []
        for _ in 0..<(quick ? 200 : 1000) {
            var result = cstallmon_capture_result()
            cstallmon_capture(slot, &frames, 256, 100_000_000, &result)
            if result.status == 0 { plainPauses.append(Double(result.handler_done_ns - result.signal_sent_ns) / 1e3) }
            result = cstallmon_capture_result()
            cstallmon_capture_with_frame_pointers(slot, &frames, &framePointers, 256, 100_000_000, &result)
            guard result.status == 0, result.job_frame < result.frame_count else { continue }
            pointerPauses.append(Double(result.handler_done_ns - result.signal_sent_ns) / 1e3)
            var truncated: UInt32 = 0
            let start = nowNanoseconds()
            let count = cstallmon_task_await_chain(task, result.job_context, framePointers[Int(result.job_frame)],
                                                   &chain, UInt32(chain.count), &truncated)
            reads.append(Double(nowNanoseconds() - start) / 1e3)
            lengths.append(Double(count))
            guard activeTaskAt != 0 else { continue }
            result = cstallmon_capture_result()
            cstallmon_capture_recording_word(slot, &frames, &framePointers, 256, 100_000_000, activeTaskAt,
                                             UInt(CSTALLMON_TASK_JOB_ID_OFFSET), &result)
            guard result.status == 0, result.job_frame < result.frame_count, result.recorded_word == task else {
                continue
            }
            recordingPauses.append(Double(result.handler_done_ns - result.signal_sent_ns) / 1e3)
            let threadStart = nowNanoseconds()
            let threadCount = cstallmon_thread_await_chain(thread, task, UInt32(truncatingIfNeeded: result.pointed_word),
                                                           result.job_context, framePointers[Int(result.job_frame)],
                                                           &chain, UInt32(chain.count), &truncated)
            if threadCount == count { threadReads.append(Double(nowNanoseconds() - threadStart) / 1e3) }
        }
        guard !reads.isEmpty, Stats.median(lengths) > 0 else {
            throw ValidationError("the stalled job's await chain was not found (\(reads.count) captures)")
        }
        results.add(Figure(section: "capture", name: "async job: pause per sample, + job context",
                           value: Stats.median(pointerPauses), unit: "us", peerName: "without",
                           peer: Stats.median(plainPauses),
                           ratio: Stats.median(pointerPauses) / Stats.median(plainPauses),
                           ratioMeaning: "× without",
                           note: String(format: "medians; p99 %.1f → %.1f us", Stats.percentile(plainPauses, 0.99),
                                        Stats.percentile(pointerPauses, 0.99))))
        results.add(Figure(section: "capture", name: "async job: await chain read, median",
                           value: Stats.median(reads), unit: "us",
                           note: String(format: "%.0f resume points, %d awaiting functions", Stats.median(lengths),
                                        depth)))
        results.add(Figure(section: "capture", name: "async job: await chain read, p99",
                           value: Stats.percentile(reads, 0.99), unit: "us"))
        guard !recordingPauses.isEmpty, !threadReads.isEmpty else {
            throw ValidationError("the active task was not recorded or its chain not read (\(recordingPauses.count) captures)")
        }
        results.add(Figure(section: "capture", name: "drain job or loop: pause per sample, + active task",
                           value: Stats.median(recordingPauses), unit: "us", peerName: "job context only",
                           peer: Stats.median(pointerPauses),
                           ratio: Stats.median(recordingPauses) / Stats.median(pointerPauses),
                           ratioMeaning: "× job context only",
                           note: String(format: "medians; p99 %.1f us", Stats.percentile(recordingPauses, 0.99))))
        results.add(Figure(section: "capture", name: "drain job or loop: await chain read, median",
                           value: Stats.median(threadReads), unit: "us", peerName: "task's job",
                           peer: Stats.median(reads), ratio: Stats.median(threadReads) / Stats.median(reads),
                           ratioMeaning: "× task's job",
                           note: String(format: "p99 %.1f us; the task and its id read again after the chain",
                                        Stats.percentile(threadReads, 0.99))))
    }
}

/// The job the cost is measured on: where it runs, and when to stop.
final class StalledJob: Sendable {
    let tid = Atomic<Int32>(0)
    let task = Atomic<UInt>(0)
    /// The worker's pthread_self(): where its active task is.
    let thread = Atomic<UInt>(0)
    let stop = Atomic<Bool>(false)
}

enum AwaitingLayers {
    /// Suspends once, then awaits the next layer; the last one spins on its worker until told to stop.
    @inline(never)
    static func layer(_ remaining: Int, _ job: StalledJob) async {
        try? await Task.sleep(for: .milliseconds(1))
        if remaining == 0 {
            spin(job)
            return
        }
        await layer(remaining - 1, job)
    }

    @inline(never)
    static func spin(_ job: StalledJob) {
        // libdispatch blocks signals on its workers; the monitor's probe unblocks the sampling signal on a worker's
        // first job, as this does (the bench runs without the executor hooks).
        var sampling = sigset_t()
        sigemptyset(&sampling)
        sigaddset(&sampling, cstallmon_installed_signal())
        pthread_sigmask(SIG_UNBLOCK, &sampling, nil)
        let task = withUnsafeCurrentTask { $0.map { unsafeBitCast($0, to: UInt.self) } } ?? 0
        job.task.store(task, ordering: .relaxed)
        job.thread.store(UInt(pthread_self()), ordering: .relaxed)
        job.tid.store(cstallmon_gettid(), ordering: .releasing)
        while !job.stop.load(ordering: .relaxed) { sched_yield() }
    }
}
