import CStallmonConcurrency
import StallmonLoop
import StallmonReport

/// One consistent look at a worker's probe of Swift Concurrency's pool (`cstallmon_worker_read`), under names that
/// say what its fields mean: the probe's `sequence` is odd while a job runs, and counts two per job.
struct WorkerReading {
    /// The probe's index (0 ..< `CSTALLMON_MAX_WORKERS`).
    let index: Int32
    let raw: cstallmon_worker_reading

    /// Probe `index` now; nil when no worker holds it.
    static func read(index: Int32) -> WorkerReading? {
        var raw = cstallmon_worker_reading()
        guard cstallmon_worker_read(index, &raw) == 1 else { return nil }
        return WorkerReading(index: index, raw: raw)
    }

    var tid: Int32 { raw.tid }
    /// Bumped each time a new thread claims the probe: a new generation in the same probe is a new worker.
    var generation: UInt32 { raw.generation }
    /// A live worker (not one whose thread is exiting).
    var isAlive: Bool { raw.state == 1 }
    var isRunningJob: Bool { raw.sequence & 1 == 1 }
    /// The running job is an actor's drain job (or another job that is not a task): the tasks it runs are found
    /// through the worker's active task.
    var isDrain: Bool { isRunningJob && raw.kind != 0 }
    /// The number of the job running now (1-based), or of the next one to run.
    var jobNumber: UInt64 { (raw.sequence + 1) / 2 }
    var completedJobs: UInt64 { raw.sequence / 2 }
    /// The probe's sequence: the same while the same job runs (label and task-name reads are checked against it).
    var jobSequence: UInt64 { raw.sequence }
    /// CLOCK_MONOTONIC ns when the running job began (meaningful while `isRunningJob`).
    var jobSince: UInt64 { raw.job_since }
    var runsMainActor: Bool { raw.main_actor == 1 }
    /// The job's pool class (`cstallmon_pool_class`: its priority band, or the main actor).
    var poolClass: Int32 { cstallmon_pool_class_of(raw.priority, raw.main_actor) }

    /// The probe as a stall detector reads a loop's: a job is an iteration.
    var loopReading: LoopProbe.Reading {
        isRunningJob ? .busy(iteration: jobNumber, since: jobSince) : .idle(completedIterations: completedJobs)
    }

    /// The job as reports name it (its task's name read while it still runs).
    var job: StallReport.Job {
        StallReport.Job(
            executor: runsMainActor ? "main" : "global", priority: StallReport.Job.priorityName(raw.priority),
            taskId: raw.kind == 0 ? raw.task_id : nil, kind: StallReport.Job.kindName(raw.kind),
            taskName: raw.named_task == 1 ? taskName : nil)
    }

    /// The label (`StallLabel`, with the request's trace ids) of the task the worker runs as this job, if its scope
    /// or an ancestor's set one and the worker still runs it.
    var label: TaskLabel? {
        var entry = cstallmon_label_entry()
        guard cstallmon_worker_label(index, raw.sequence, raw.task_id, &entry) == 1 else { return nil }
        return TaskLabel(entry)
    }

    /// The label of the task this actor drain job ran when `sample` stopped the worker, if the drain still runs it:
    /// what a snapshot's entry shows with that sample, so that both are of one task.
    func drainedLabel(of sample: RawSample) -> TaskLabel? {
        guard isDrain, sample.activeTask != 0 else { return nil }
        var entry = cstallmon_label_entry()
        guard cstallmon_worker_drained_task_label(index, raw.sequence, sample.activeTask, sample.activeTaskJobId,
                                                  &entry) == 1 else { return nil }
        return TaskLabel(entry)
    }

    /// The name of the task the worker runs as this job, if it has one and still runs it.
    private var taskName: String? {
        readCString(capacity: 256) { Int(cstallmon_worker_task_name(index, raw.sequence, $0, $1)) }
    }

    /// Whether the same job still runs on the same worker as in `earlier`.
    func isSameJob(as earlier: WorkerReading) -> Bool {
        index == earlier.index && generation == earlier.generation && raw.sequence == earlier.raw.sequence
    }
}
