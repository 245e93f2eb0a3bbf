// CStallmonConcurrency: every job of Swift Concurrency's global executor timed, on the threads that run it today.
//
// Why this exists: on Linux the global executor is libdispatch: one concurrent queue per priority, as wide as the
// machine has CPUs, and a job that blocks takes a whole worker away. Nothing in the runtime says when a job began
// or how long it has run. The runtime consults `swift_task_enqueueGlobal_hook` (and its `WithDelay` and
// `WithDeadline` siblings) before it enqueues a job; this target installs all three and does what the runtime's own
// `DispatchGlobalExecutor.cpp` does (the same queues: one per priority, created with the job's priority as QoS and
// `dispatch_queue_set_width(q, -3)`, the runtime's "as many as logical CPUs"; `dispatch_async_f`; the job run with
// `swift_job_run` on the generic executor), with one difference: the function dispatch calls stamps the worker's
// probe before and after the job, and counts its run time and queue delay. Per job that is three reads of the TSC
// (rdtsc: when the job is enqueued, when it begins, when it ends) where the kernel keeps time with it, elsewhere three
// CLOCK_MONOTONIC reads; the probe's relaxed or release stores; and two histogram buckets and five totals counted
// (a relaxed load and store each, one writer). No lock, allocation or system call (the clocks are vDSO reads). The
// watchdog converts ticks to CLOCK_MONOTONIC ns when it reads them.
//
// Worker threads come and go (libdispatch retires a worker idle for 5 s): a worker claims a probe on its first job
// (one gettid, one pthread_sigmask to unblock the sampling signal, which libdispatch blocks on its workers, one
// pthread_setspecific, and, the first time a probe is ever claimed, one calloc of its statistics, kept for the
// probe's later threads), and gives it back when it exits. A probe the monitor is signalling is pinned: the exiting
// thread waits (bounded) until the pin is gone, so a thread id is never signalled after its thread exited and the
// number may have been reused.
#ifndef CSTALLMON_CONCURRENCY_H
#define CSTALLMON_CONCURRENCY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/// How many workers can be watched at once (probes are preallocated; a worker beyond this runs its jobs unwatched).
#define CSTALLMON_MAX_WORKERS 256

/// Outcome of `cstallmon_concurrency_install`.
typedef enum {
    CSTALLMON_CONCURRENCY_INSTALLED = 0,
    /// Another party (NIO's executor take-over, say) already set one of the hooks; nothing was changed.
    CSTALLMON_CONCURRENCY_HOOK_TAKEN = 1,
    /// This process's Swift runtime has no such hooks (too old, or not linked).
    CSTALLMON_CONCURRENCY_NO_HOOKS = 2,
    /// Already installed by this target (the hooks stay; one install per process).
    CSTALLMON_CONCURRENCY_ALREADY = 3,
} cstallmon_concurrency_install_result;

/// Installs the three global-enqueue hooks, each with a compare-and-swap from NULL, so another owner is never
/// overwritten: the global hook first (when it is taken nothing of this target's was ever set), then the delayed ones
/// (when one of them is taken, the ones this call set are put back). The worker-exit pthread key is created at the
/// first install and never deleted (a job queued through a hook that was put back still uses it). `sampling_signal` is
/// unblocked on each worker at its first job (0: leave the mask alone). `threshold_ns`: a job that ran at least this
/// long leaves an exact record of its begin and end (see `cstallmon_worker_long_job`). One install at a time (a
/// mutex). NOT async-signal-safe (a mutex, a pthread key, the job clock's calibration).
cstallmon_concurrency_install_result cstallmon_concurrency_install(int sampling_signal, uint64_t threshold_ns);

/// Whether this target's hooks are installed. Async-signal-safe.
int cstallmon_concurrency_installed(void);

/// Outcome of the install's compare-and-swaps (`cstallmon_concurrency_swap_hooks`, CStallmonConcurrencyTesting).
typedef enum {
    /// All three hooks were set.
    CSTALLMON_HOOKS_SET = 0,
    /// The global hook was taken; none of the three was set.
    CSTALLMON_HOOKS_GLOBAL_TAKEN = 1,
    /// A delayed hook was taken after the global one was set; the ones set were put back (jobs enqueued through them
    /// meanwhile still run through this target).
    CSTALLMON_HOOKS_ROLLED_BACK = 2,
} cstallmon_hooks_outcome;

/// One look at a worker's probe, consistent (a seqlock read).
typedef struct {
    /// 0: the probe is free (no worker); 1: a live worker; 2: its thread is exiting.
    int32_t state;
    int32_t tid;
    /// Bumped each time a new thread claims the probe, so a reader can tell a new worker in the same probe.
    uint32_t generation;
    /// The job's priority (the runtime's JobPriority: 0x21 user-initiated … 0x09 background, 0 unspecified) and
    /// kind (0: a task; other values: an actor's drain job or another kind of job).
    uint8_t priority;
    uint8_t kind;
    /// 1: the job runs on the main actor (see `cstallmon_concurrency_enqueue_main`); 0: the global executor.
    uint8_t main_actor;
    /// 1: the running job is a task created with a name (`Task(name:)`); see `cstallmon_worker_task_name`.
    uint8_t named_task;
    /// Odd while a job runs; jobs completed = sequence / 2.
    uint64_t sequence;
    /// CLOCK_MONOTONIC ns when the running job began (meaningful while `sequence` is odd).
    uint64_t job_since;
    /// The running job's task id (`swift_task_getJobTaskId`: the task's id, or the job's own for other jobs).
    uint64_t task_id;
} cstallmon_worker_reading;

/// Enqueues a main-actor job on the main queue, as the runtime's own main executor does (`dispatch_async_f` on the
/// main queue), to be run on the main executor and timed in the probe of the worker that drains the main queue (on
/// Linux, after `dispatch_main()`, a libdispatch worker). For stallmon's own `MainExecutor`. NOT async-signal-safe.
void cstallmon_concurrency_enqueue_main(void *job);

/// Reads probe `index` (0 ..< CSTALLMON_MAX_WORKERS). Returns 0 when the probe is free, 1 otherwise. A job found
/// running is marked in the probe as seen, so that with pool_statistics = off its worker reads the job's end (a stall
/// begins only on such a reading). For the watchdog thread, one caller at a time (converting the job clock may
/// recalibrate it); async-signal-safe: no lock, allocation or system call (vDSO clock reads).
int cstallmon_worker_read(int index, cstallmon_worker_reading *out);

/// One past the highest probe index any worker has claimed (0 ..< CSTALLMON_MAX_WORKERS): probes beyond it are free,
/// so a reader scans `0 ..< cstallmon_workers_used()`. Async-signal-safe (one atomic load).
int cstallmon_workers_used(void);

/// The exact begin and end of job number `job` (1-based, = (sequence + 1) / 2 while it ran) of probe `index`, if it
/// was the probe's most recent job to run for at least the threshold and the record still holds it. Returns 1 and
/// fills both, or 0. For the watchdog thread, as `cstallmon_worker_read`.
int cstallmon_worker_long_job(int index, uint64_t job, uint64_t *begin, uint64_t *end);

/// Pins probe `index` while its worker is signalled: succeeds (1) only while that worker of `generation` is alive;
/// the worker's thread then cannot finish exiting until `cstallmon_worker_unpin`. One pin at a time (the watchdog
/// thread). Async-signal-safe.
int cstallmon_worker_pin(int index, uint32_t generation);
void cstallmon_worker_unpin(int index);

/// Checks, from inside a task created with a name, that this target finds the name where Swift 6.3's runtime keeps
/// it: `current_task` is the running task (`withUnsafeCurrentTask`), `expected` its `Task.name`. Returns 1 when the
/// name read equals `expected` (task names are read from then on), -1 otherwise (they are never read). NOT
/// async-signal-safe (system calls).
int cstallmon_concurrency_check_task_names(uintptr_t current_task, const char *expected);

/// The name of the named task (see `named_task`) that probe `index` runs as its job `sequence` (odd), copied into
/// `out` with its NUL; returns its length, or -1: the job is over, the task has no name, the name does not fit, or
/// the layout check has not passed. Each read is a process_vm_readv of this process, which fails rather than faults
/// on a stale pointer, and the probe is read again after it, so a name is returned only if its task ran throughout.
/// For the watchdog thread; NOT async-signal-safe (system calls).
ssize_t cstallmon_worker_task_name(int index, uint64_t sequence, char *out, size_t capacity);

// MARK: Await chains
//
// In async code a thread's stack ends where its job began: the functions that awaited the running one are suspended,
// and live only as the task's async contexts, each starting with its caller's context and the address where that
// caller resumes. An async function's frame keeps its context just below its frame pointer. The watchdog reads them
// (process_vm_readv, never the worker) from the frame pointers a capture recorded
// (`cstallmon_capture_with_frame_pointers`). The layout is Swift 6.3's on 64-bit Linux, not a public interface:
// checked once at start with real functions, and chains are read only after that check passed.

/// Resume points an await chain holds at most; a longer chain is cut at this many (its outermost callers dropped).
#define CSTALLMON_MAX_AWAIT_FRAMES 64

/// The await chain of the task that probe `index` runs as its job `sequence` (odd), from a capture of that worker
/// with frame pointers: `job_context`, the async context the handler read below the frame pointer of the job's first
/// frame (`cstallmon_capture_with_frame_pointers`), and that frame pointer. Writes innermost first where each
/// awaiting function resumes (a function's entry, not a return address), ending with the task's root. Returns how
/// many were written (at most `capacity`; `truncated` set when more were left), or -1: the job is over or is not a
/// task, the contexts do not lead to that task's first context, the function the handler found has since returned
/// (another context below its frame pointer), or the layout check has not passed. The probe is read again after the
/// reads, so a chain is returned only if its job ran throughout. `drained_task` and `drained_job_id` are the task the
/// capture found running and its job id (its recorded words): for a task's job, that task must be the job's, and
/// still have that id after the reads (a task freed in its last job may be reused before the probe records the
/// job's end); for an actor's drain job (no task of its own), the drain must still run that task, of that id (and
/// the drain check have passed). For the watchdog thread; NOT async-signal-safe. (For a task the caller knows to be
/// running, the benchmark's case, see CStallmonConcurrencyTesting.)
int cstallmon_worker_await_chain(int index, uint64_t sequence, uintptr_t job_context, uintptr_t job_frame_pointer,
                                 uintptr_t drained_task, uint32_t drained_job_id, uintptr_t *out, uint32_t capacity,
                                 uint32_t *truncated);

/// Once the layout check passed (returns true): where an async job's first frame is, for
/// `cstallmon_set_async_job_frames`: the executor's job runners' code and the return address of the runtime's call
/// into a task's first partial function. Async-signal-safe (atomic loads).
bool cstallmon_concurrency_await_frames(uintptr_t *runner_start, uintptr_t *runner_end, uintptr_t *resume_call);

/// The layout check, in two calls from a task the monitor starts: an async `outer` function awaits an async `inner`
/// one; `inner`, after a real suspension, calls `..._inner` with the running task (`withUnsafeCurrentTask`), which
/// reads the chain of `inner`'s own frame and counts the runtime's frames between it and the job runner; `outer`,
/// right after `inner` returned, calls `..._outer`. The check passes when that chain begins with where `outer`
/// resumed: the partial function the second call came from.
/// Returns 1 (chains are read from then on) or -1 (never). One check at a time. NOT async-signal-safe.
void cstallmon_concurrency_await_check_inner(uintptr_t current_task);
int cstallmon_concurrency_await_check_outer(void);

/// What `cstallmon_concurrency_drain_check` found (flags).
#define CSTALLMON_DRAIN_SEEN 1         // the calling job is an actor's drain job, not a task
#define CSTALLMON_DRAIN_ACTIVE_TASK 2  // the active task's variable (current_task.c) holds the calling task there
#define CSTALLMON_DRAIN_CHAIN 4        // the drain resumed the caller from the same call, and its chain was read

/// The drain check: called by an actor's method right after it resumed from a suspension, in `current_task`, a task
/// other than the one that ran `cstallmon_current_task_find`. Returns 0 when the job running the caller is not an
/// actor's drain job (the method ran on its caller's thread: try again), otherwise CSTALLMON_DRAIN_* flags. Confirms
/// the active task's candidates (`cstallmon_current_task_confirm`). NOT async-signal-safe.
int cstallmon_concurrency_drain_check(uintptr_t current_task);

/// The drain check's verdict: from `passed` on (with the layout check passed), chains are read in actors' drain
/// jobs too; otherwise never. Async-signal-safe.
void cstallmon_concurrency_set_drain_chains(int passed);

/// 0: not checked yet; 1: chains are read in actors' drain jobs; -1: never. Async-signal-safe.
int cstallmon_concurrency_drain_chains(void);

// MARK: The task an actor's drain job runs
//
// A drain job runs the tasks queued on an actor one after another; the runtime's thread-local active task says which
// one runs now. Where that variable is, is found at start (see current_task.c): these are the check's steps.

/// First, on any thread (not a pool worker: it takes the loader's lock): where the runtime's thread-local block lies
/// from the thread's pthread_self(). Returns 1, or -1 when the runtime has none. One check at a time. NOT
/// async-signal-safe.
int cstallmon_current_task_locate_block(void);

/// Then, from inside a task (`current_task`): the words of its own thread's block equal to it. Returns how many
/// candidates were kept (at most 4), or -1. One check at a time. NOT async-signal-safe (system calls).
int cstallmon_current_task_find(uintptr_t current_task);

/// Keeps the candidates at which the calling thread's word is `expected` (0 on a thread that runs no task); returns
/// how many remain. One caller at a time. NOT async-signal-safe.
int cstallmon_current_task_confirm(uintptr_t expected);

/// The verdict: from `passed` on (with a candidate left), a drain job's labels are read from its running task;
/// otherwise never. Async-signal-safe.
void cstallmon_current_task_set_verdict(int passed);

/// 0: not checked yet; 1: passed; -1: failed. Async-signal-safe.
int cstallmon_current_task_layout(void);

/// The layout check's verdict: 0 not run yet, 1 passed, -1 failed. Async-signal-safe (one atomic load).
int cstallmon_concurrency_await_chain_layout(void);

/// The pool classes jobs are counted in: the global executor's priority bands (high: user-initiated and above;
/// medium: default, and unspecified; low: utility; background) and the main actor.
typedef enum {
    CSTALLMON_POOL_HIGH = 0,
    CSTALLMON_POOL_MEDIUM = 1,
    CSTALLMON_POOL_LOW = 2,
    CSTALLMON_POOL_BACKGROUND = 3,
    CSTALLMON_POOL_MAIN = 4,
    CSTALLMON_POOL_CLASSES = 5,
} cstallmon_pool_class;

/// Sends the canary: a tiny work item on the global executor's medium-priority queue (where jobs without a
/// priority go), whose wait to begin is a new job's wait for a worker. One at a time: returns 1 if sent now, 0 if
/// one is still waiting (or the hooks are not installed). For the watchdog thread; NOT async-signal-safe.
int cstallmon_concurrency_send_canary(void);

/// The latest canary: when it was sent and, once a worker ran it, when it began (CLOCK_MONOTONIC ns; 0 while it
/// waits). Returns 1 while it waits, 0 once it ran, -1 if none was ever sent. For the watchdog thread, as
/// `cstallmon_worker_read`.
int cstallmon_concurrency_canary(uint64_t *sent_ns, uint64_t *started_ns);

/// The pool class of a job with this priority (`cstallmon_worker_reading.priority`), on the main actor or not.
/// Async-signal-safe.
int cstallmon_pool_class_of(uint8_t priority, uint8_t main_actor);

/// Totals of one pool class since the hooks were installed, over every worker (cumulative; read differences).
typedef struct {
    uint64_t jobs;
    /// Run time of those jobs (begin to end), ns.
    uint64_t run_ns;
    /// Queue delay of those jobs (enqueued, or due when delayed, to begin), ns.
    uint64_t delay_ns;
    /// Jobs that ran for at least the threshold.
    uint64_t slow_jobs;
    /// Jobs that waited for at least the threshold before they began.
    uint64_t long_delays;
} cstallmon_pool_totals;

/// Adds up the job statistics every worker has kept for pool class `pool`: the totals, and the run-time and
/// queue-delay histograms (`bucket_count` must be CStallmonLoopShims' CSTALLMON_HISTOGRAM_BUCKETS; its log-linear
/// buckets). Each count is read whole; a job counted meanwhile may or may not be in. Returns 0 (all zero) on a bad
/// class or bucket count, 1 otherwise. For the watchdog thread; async-signal-safe (relaxed loads only).
int cstallmon_pool_stats(int pool, cstallmon_pool_totals *out, uint64_t *run_buckets, uint64_t *delay_buckets,
                         size_t bucket_count);

/// The longest label kept (bytes of UTF-8; a longer one is cut).
#define CSTALLMON_LABEL_MAX_BYTES 96

/// One stall label as the watchdog reads it: the text, and the W3C ids of the request's span when it was traced.
typedef struct {
    char text[CSTALLMON_LABEL_MAX_BYTES + 1];
    uint32_t length;
    /// 1: `trace_id` and `span_id` hold the span's ids (a `traceparent`'s, as bytes); 0: not traced.
    uint8_t traced;
    uint8_t trace_id[16];
    uint8_t span_id[8];
} cstallmon_label_entry;

/// Takes an entry for a scope: `text` (`length` bytes, cut at CSTALLMON_LABEL_MAX_BYTES) and, if both are not NULL,
/// the span's 16-byte trace id and 8-byte span id. Returns the entry's id, never reused, for the scope's task-local
/// and `cstallmon_label_close`; 0 when all 4,096 entries are taken (the label is dropped and counted). Lock-free (a
/// fetch-add, a compare-and-swap on the first free slot from the one its sequence number gives, and a seqlocked
/// copy), no allocation. Async-signal-safe.
uint64_t cstallmon_label_open(const char *text, size_t length, const uint8_t *trace_id, const uint8_t *span_id);

/// Gives back the entry `id` (nothing if it is not open). Async-signal-safe.
void cstallmon_label_close(uint64_t id);

/// Copies entry `id` into `out`: 1, or 0 when it is not open (or holds nothing). Async-signal-safe.
int cstallmon_label_lookup(uint64_t id, cstallmon_label_entry *out);

/// Labels dropped because the table was full. Async-signal-safe.
uint64_t cstallmon_labels_dropped(void);

// MARK: A task's own task-local (task_locals.c)
//
// The entry's id is a task-local of the task that opened it, inherited by every task started in its scope. The
// watchdog reads it from the stalled task's task-local bindings; where a task keeps them is found at start with real
// tasks (below), not assumed, and nothing is read before that check passed.

/// The check's first step, from inside a task whose only binding is `key` (the TaskLocal object's address) bound to
/// `expected` (not 0): finds the word of `task` (the running task, `withUnsafeCurrentTask`) that leads to its
/// bindings. Returns its offset, or -1. One check at a time. NOT async-signal-safe (system calls).
int cstallmon_task_locals_find_head(uintptr_t task, uintptr_t key, uint64_t expected);

/// The check's next steps, from inside `task`: whether the innermost binding of the key found is `expected` (0:
/// that there is none). Returns 1 or -1. NOT async-signal-safe.
int cstallmon_task_locals_confirm(uintptr_t task, uint64_t expected);

/// The check's verdict: from `passed` on, values are read; otherwise never. Async-signal-safe.
void cstallmon_task_locals_set_verdict(int passed);

/// 0: not checked yet; 1: passed; -1: failed. Async-signal-safe.
int cstallmon_task_locals_layout(void);

/// The innermost binding of the checked key in `task`, which the caller knows to be alive: 1 and its value, 0 when
/// none, -1 when unreadable or the check has not passed. Async-signal-safe (process_vm_readv and atomics).
int cstallmon_task_local_value(uintptr_t task, uint64_t *value);

/// The label of the task that probe `index` runs as its job `sequence` (odd) with task id `task_id` (the reading's),
/// if the job is a task whose scope (or an ancestor's) has an open entry: 1 and the entry; -1 otherwise (or when the
/// job ended, or the task's memory holds another task, after the reads). For an actor's drain job, the label of the
/// task it runs now (once the active task's check passed; `task_id` is then not used). For the watchdog thread;
/// async-signal-safe (process_vm_readv and atomics), though only the watchdog calls it.
int cstallmon_worker_label(int index, uint64_t sequence, uint64_t task_id, cstallmon_label_entry *out);

/// Where a task keeps its job id (`Job::Id`, the low 32 bits of its task id) on Swift 6.3, 64-bit: confirmed at start
/// on every task of the label check. A capture of a drain job records it with the task (`pointed_offset`).
#define CSTALLMON_TASK_JOB_ID_OFFSET 0x24

/// For probe `index`'s actor drain job `sequence` (odd), once the active task's check passed, the label of `task`,
/// the task it ran when a capture stopped it, whose job id the capture read then (`job_id`; the capture's recorded
/// words, see `cstallmon_worker_active_task_address`). Returns 1 and the label, or -1: not a drain, no label, or,
/// after the reads, the drain no longer runs that task (or that address holds another task now). For the watchdog
/// thread; async-signal-safe (process_vm_readv and atomics), though only the watchdog calls it.
int cstallmon_worker_drained_task_label(int index, uint64_t sequence, uintptr_t task, uint32_t job_id,
                                        cstallmon_label_entry *label);

/// Where probe `index`'s thread keeps the runtime's active task (a word of its thread-local block), for a capture to
/// record with the stack (`cstallmon_capture_recording_word`); 0 until the active task's check passed.
/// Async-signal-safe (atomic loads).
uintptr_t cstallmon_worker_active_task_address(int index);

/// The same for the thread whose pthread_self() is `thread` (a loop thread: `cstallmon_slot_thread`).
/// Async-signal-safe (atomic loads).
uintptr_t cstallmon_thread_active_task_address(uintptr_t thread);

/// The task that thread runs now (its active task), or 0: none, or the check has not passed. Async-signal-safe
/// (process_vm_readv and atomics).
uintptr_t cstallmon_thread_active_task(uintptr_t thread);

/// The await chain of the task a loop thread (pthread_self() `thread`) ran when a capture stopped it: `task` and
/// `job_id`, the capture's recorded words; `job_context` and `job_frame_pointer`, as for
/// `cstallmon_worker_await_chain`. Returned only if, after the reads, the thread still runs that task, of that id,
/// and the function found still runs in its frame (and the checks at start passed). Returns the count or -1. For the
/// watchdog thread; NOT async-signal-safe.
int cstallmon_thread_await_chain(uintptr_t thread, uintptr_t task, uint32_t job_id, uintptr_t job_context,
                                 uintptr_t job_frame_pointer, uintptr_t *out, uint32_t capacity, uint32_t *truncated);

/// How many workers ran jobs unwatched because every probe was taken. Async-signal-safe.
uint64_t cstallmon_concurrency_unwatched_workers(void);

/// Jobs timed so far by the hooks, over all workers (relaxed; for tests and statistics). Async-signal-safe.
uint64_t cstallmon_concurrency_jobs(void);

/// Whether every job's queue delay and run time are counted (the pool statistics: the enqueue stamp and the
/// histograms), 1 by default; with 0 the workers stamp only a job's begin and end, which stall and starvation
/// detection need. Takes effect for jobs enqueued and ending from then on. Async-signal-safe (an atomic store).
void cstallmon_concurrency_set_statistics(int enabled);
int cstallmon_concurrency_statistics(void);

/// Changes the sampling signal workers unblock at their first job and the long-job threshold (a new monitor after
/// a stopped one). Async-signal-safe.
void cstallmon_concurrency_configure(int sampling_signal, uint64_t threshold_ns);

#ifdef __cplusplus
}
#endif

#endif
