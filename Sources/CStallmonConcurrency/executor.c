// The global executor's jobs, timed per worker. See CStallmonConcurrency.h for why and how.
#ifndef _GNU_SOURCE
#error You must define _GNU_SOURCE
#endif

#include "CStallmonConcurrency.h"
#include "CStallmonLoopShims.h"
#include "CStallmonMeasure.h"
#include "worker_jobs.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <fcntl.h>
#include <x86intrin.h>
#endif

// MARK: - The runtime's and libdispatch's entry points
//
// Declared here rather than taken from <dispatch/dispatch.h> and the runtime's headers, which a C target of a
// package cannot find on every installation. The signatures are those of Swift 6.x's ConcurrencyHooks.def and
// libdispatch's public (and, for dispatch_queue_set_width, exported private) API.

#define SWIFTCC __attribute__((swiftcall))

typedef struct swift_job swift_job;

typedef SWIFTCC void (*enqueue_global_original)(swift_job *job);
typedef SWIFTCC void (*enqueue_global_hook)(swift_job *job, enqueue_global_original original);
typedef SWIFTCC void (*enqueue_delay_original)(unsigned long long delay, swift_job *job);
typedef SWIFTCC void (*enqueue_delay_hook)(unsigned long long delay, swift_job *job, enqueue_delay_original original);
typedef SWIFTCC void (*enqueue_deadline_original)(long long sec, long long nsec, long long tsec, long long tnsec,
                                                  int clock, swift_job *job);
typedef SWIFTCC void (*enqueue_deadline_hook)(long long sec, long long nsec, long long tsec, long long tnsec, int clock,
                                              swift_job *job, enqueue_deadline_original original);

// Weak: resolved through the GOT (no copy relocation the runtime would never read), to the shared library's
// variable or, under --static-swift-stdlib, to the static archive's, where dlsym would find nothing.
extern void *swift_task_enqueueGlobal_hook __attribute__((weak));
extern void *swift_task_enqueueGlobalWithDelay_hook __attribute__((weak));
extern void *swift_task_enqueueGlobalWithDeadline_hook __attribute__((weak));

// swift_job_run(Job *, SerialExecutorRef): the executor reference is two words; {0, 0} is the generic executor,
// which is what the runtime's own dispatch executor passes for global jobs.
extern SWIFTCC void swift_job_run(swift_job *job, void *executor_identity, uintptr_t executor_implementation);
extern SWIFTCC uint64_t swift_task_getJobTaskId(swift_job *job);
extern SWIFTCC void swift_get_time(long long *seconds, long long *nanoseconds, int clock);
typedef struct {
    void *identity;
    uintptr_t implementation;
} serial_executor_ref;
extern SWIFTCC serial_executor_ref swift_task_getMainExecutor(void);

typedef struct dispatch_queue_s *dispatch_queue_t;
typedef void *dispatch_queue_attr_t;
extern struct dispatch_queue_attr_s _dispatch_queue_attr_concurrent;
extern struct dispatch_queue_s _dispatch_main_q;  // dispatch_get_main_queue()
extern dispatch_queue_attr_t dispatch_queue_attr_make_with_qos_class(dispatch_queue_attr_t attr, unsigned int qos,
                                                                     int relative_priority);
extern dispatch_queue_t dispatch_queue_create(const char *label, dispatch_queue_attr_t attr);
extern void dispatch_queue_set_width(dispatch_queue_t queue, long width);
extern void dispatch_async_f(dispatch_queue_t queue, void *context, void (*work)(void *));
extern void dispatch_after_f(uint64_t when, dispatch_queue_t queue, void *context, void (*work)(void *));
extern uint64_t dispatch_time(uint64_t when, int64_t delta);

#define DISPATCH_TIME_NOW 0ull
#define DISPATCH_TIME_FOREVER (~0ull)
// DISPATCH_QUEUE_WIDTH_MAX_LOGICAL_CPUS: the width the runtime gives its global queues.
#define QUEUE_WIDTH_LOGICAL_CPUS (-3)
// The runtime's clock ids (swift_clock_id): continuous and suspending.
#define SWIFT_CLOCK_CONTINUOUS 1
#define SWIFT_CLOCK_SUSPENDING 2

// The job header's layout on 64-bit platforms (the runtime's Job: HeapObject, SchedulerPrivate[2], Flags, Id):
// schedulerPrivate[1] at 0x18, which the runtime's dispatch executor sets to 1 for a global job; the flags' kind
// byte at 0x20 and priority byte at 0x21.
_Static_assert(sizeof(void *) == 8, "the job header offsets below are those of 64-bit platforms");
// schedulerPrivate[0] at 0x10, free while the executor holds the job ("may be freely used by the executor
// implementation", the runtime's ExecutorImpl.h): the job-clock time it was enqueued (or is due, when delayed).
#define JOB_SCHEDULER_PRIVATE_0 0x10
#define JOB_SCHEDULER_PRIVATE_1 0x18
#define JOB_KIND 0x20
#define JOB_PRIORITY 0x21
// The flags' top byte; in a task's flags (kind 0) bit 30 is the runtime's Task_HasInitialTaskName: `Task(name:)`.
#define JOB_FLAGS_TOP 0x23
#define JOB_TOP_HAS_TASK_NAME 0x40
#define PRIORITY_COUNT 0x22
// In a probe's job attributes: the job runs on the main actor (the main queue), not the global executor.
#define JOB_ON_MAIN_ACTOR (1u << 16)

// MARK: - State

// One pool class's job statistics on one worker: run time and queue delay of every job (log-linear histograms, see
// CStallmonLoopShims), their sums and counts. One writer (the worker, with relaxed loads and stores).
typedef struct {
    uint64_t run[CSTALLMON_HISTOGRAM_BUCKETS];
    uint64_t delay[CSTALLMON_HISTOGRAM_BUCKETS];
    uint64_t jobs;
    uint64_t run_ns;
    uint64_t delay_ns;
    uint64_t slow_jobs;
    uint64_t long_delays;
} class_stats;

struct worker_stats {
    class_stats classes[CSTALLMON_POOL_CLASSES];
};

// CLAIMING: a new thread is filling the probe in (never pinned, never read as a worker).
enum { PROBE_FREE = 0, PROBE_ALIVE = 1, PROBE_EXITING = 2, PROBE_PINNED = 4, PROBE_CLAIMING = 8 };

typedef struct {
    _Atomic uint32_t state;  // PROBE_* (| PROBE_PINNED while the watchdog signals the worker)
    _Atomic uint32_t generation;
    _Atomic int32_t tid;
    _Atomic uint32_t job_attributes;  // kind | priority << 8 | JOB_ON_MAIN_ACTOR
    _Atomic uint64_t sequence;        // odd while a job runs
    _Atomic uint64_t job_since;
    _Atomic uint64_t task_id;
    // The most recent job that ran for at least the threshold (its own seqlock: odd while written).
    _Atomic uint64_t long_sequence;
    _Atomic uint64_t long_job;
    _Atomic uint64_t long_begin;
    _Atomic uint64_t long_end;
    // The running job (the task, for a task): read only under the seqlock and only while the job runs (it is alive
    // then), for its task's name and label.
    _Atomic uintptr_t job;
    // The job statistics of this probe's workers (allocated at the probe's first claim and kept for later threads).
    struct worker_stats *_Atomic stats;
    // The odd sequence of a job a reader (the watchdog) saw running. With pool_statistics = off the worker reads the
    // clock at a job's end only for that job: only a job seen running can have become a stall.
    _Atomic uint64_t seen_running;
    // The worker thread's pthread_self(), set when it claims the probe: where its thread-local variables are, for
    // the task an actor's drain job runs now (current_task.c).
    _Atomic uintptr_t thread;
    char padding[128 - 104];  // one probe per pair of cache lines: workers never share a line
} worker_probe;

_Static_assert(sizeof(worker_probe) == 128, "a probe is two cache lines");

static struct {
    _Alignas(128) worker_probe probes[CSTALLMON_MAX_WORKERS];
    dispatch_queue_t _Atomic queues[PRIORITY_COUNT];
    _Atomic int installed;
    _Atomic int sampling_signal;
    // The long-job threshold in job-clock ticks (see "The job clock").
    _Atomic uint64_t threshold_ticks;
    _Atomic uint64_t jobs_of_exited_workers;
    // One past the highest probe index ever claimed: the readers scan no further (probes are claimed lowest first,
    // so a pool of N workers scans about N, not CSTALLMON_MAX_WORKERS). Raised once per worker thread, never per job.
    _Atomic int probes_used;
    // 1: every job's queue delay and run time are counted (the enqueue stamp, the histograms); 0: only what stall
    // detection needs (the begin and end stamps).
    _Atomic int statistics;
    // Serialises installs; exit_key and exit_key_created are written under it, before any hook is in.
    pthread_mutex_t install_lock;
    pthread_key_t exit_key;
    bool exit_key_created;
} g_state = {.statistics = 1, .install_lock = PTHREAD_MUTEX_INITIALIZER};

// The calling worker's probe; &g_unwatched when every probe was taken.
static __thread worker_probe *t_probe;
// The calling worker's statistics; NULL when unwatched (or their allocation failed).
static __thread struct worker_stats *t_stats;
// Jobs running on this thread right now: more than one when a job runs others inside it (a main-actor job that
// drains the main queue itself); only the outermost is stamped, so the probe's sequence never goes backwards.
static __thread unsigned t_depth;
static worker_probe g_unwatched;


// MARK: - The job clock

// What a worker reads around each job. Where the kernel itself keeps time with the TSC (its clocksource is `tsc`:
// invariant and synchronised across CPUs, or the kernel would not use it), the worker reads the TSC directly: rdtsc
// costs 9.6 ns here, CLOCK_MONOTONIC's vDSO read 23.7 ns (it reads the TSC too, then the kernel's seqlocked
// conversion data). The watchdog converts ticks to CLOCK_MONOTONIC ns against a pair of both clocks read just then,
// so only an elapsed time is ever scaled (by the tick length, recalibrated every second), never an absolute one.
// Elsewhere (other architectures, another clocksource), ticks are CLOCK_MONOTONIC ns.
static struct {
    bool tsc;  // set once, before the hooks are installed
    _Atomic uint64_t ns_per_tick_bits;  // a double
    _Atomic uint64_t base_tick;
    _Atomic uint64_t base_ns;
    _Atomic int calibrated;
    // ns = ticks * mult >> 32, for the workers' histograms; recalibrated with ns_per_tick.
    _Atomic uint64_t mult;
} g_clock;

static inline __attribute__((always_inline)) uint64_t job_clock_now(void) {
#if defined(__x86_64__)
    if (__builtin_expect(g_clock.tsc, 1)) return __rdtsc();
#endif
    return cstallmon_clock_monotonic_ns();
}

#if defined(__x86_64__)
// The TSC and CLOCK_MONOTONIC at (almost) one instant: the TSC between two clock reads, against their midpoint; the
// tightest of three tries, so a thread preempted between the reads does not skew a calibration.
static void clock_pair(uint64_t *tick, uint64_t *ns) {
    uint64_t best_spread = UINT64_MAX;
    for (int attempt = 0; attempt < 3; attempt++) {
        uint64_t before = cstallmon_clock_monotonic_ns();
        uint64_t read = __rdtsc();
        uint64_t after = cstallmon_clock_monotonic_ns();
        if (after - before < best_spread) {
            best_spread = after - before;
            *tick = read;
            *ns = before + (after - before) / 2;
        }
    }
}

static double ns_per_tick(void) {
    uint64_t bits = atomic_load_explicit(&g_clock.ns_per_tick_bits, memory_order_relaxed);
    double value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

static void set_ns_per_tick(double value) {
    uint64_t bits;
    memcpy(&bits, &value, sizeof bits);
    atomic_store_explicit(&g_clock.ns_per_tick_bits, bits, memory_order_relaxed);
    atomic_store_explicit(&g_clock.mult, (uint64_t)(value * 4294967296.0), memory_order_relaxed);
}

static bool kernel_keeps_time_with_tsc(void) {
    int fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    char name[16] = {0};
    ssize_t got = read(fd, name, sizeof name - 1);
    close(fd);
    return got >= 3 && strncmp(name, "tsc\n", 4) == 0;
}
#endif

// Once, before the hooks are installed (NOT async-signal-safe: a file read and a 2 ms sleep).
static void job_clock_set_up(void) {
    if (atomic_load_explicit(&g_clock.calibrated, memory_order_acquire)) return;
#if defined(__x86_64__)
    if (kernel_keeps_time_with_tsc()) {
        uint64_t tick0, ns0, tick1, ns1;
        clock_pair(&tick0, &ns0);
        struct timespec pause = {0, 2000000};
        nanosleep(&pause, NULL);
        clock_pair(&tick1, &ns1);
        if (tick1 > tick0 && ns1 > ns0) {
            set_ns_per_tick((double)(ns1 - ns0) / (double)(tick1 - tick0));
            atomic_store_explicit(&g_clock.base_tick, tick1, memory_order_relaxed);
            atomic_store_explicit(&g_clock.base_ns, ns1, memory_order_relaxed);
            g_clock.tsc = true;
        }
    }
#endif
    if (!g_clock.tsc) atomic_store_explicit(&g_clock.mult, 1ull << 32, memory_order_relaxed);
    atomic_store_explicit(&g_clock.calibrated, 1, memory_order_release);
}

// A job-clock length in ns, on a worker: one multiplication (async-signal-safe).
static inline __attribute__((always_inline)) uint64_t ticks_length_ns(uint64_t ticks) {
    return (uint64_t)(((unsigned __int128)ticks * atomic_load_explicit(&g_clock.mult, memory_order_relaxed)) >> 32);
}

// The longest delay the job clock scales (about 11.6 days): anything longer is "never" for a queue delay, and keeps
// the conversion and the due time far from overflow.
#define MAX_SCALED_NS 1000000000000000ull

static uint64_t ns_to_ticks(uint64_t ns) {
    if (ns > MAX_SCALED_NS) ns = MAX_SCALED_NS;
#if defined(__x86_64__)
    if (g_clock.tsc) return (uint64_t)((double)ns / ns_per_tick());
#endif
    return ns;
}

// The long-job threshold as set, in ns: kept so a recalibration can restate it in ticks.
static _Atomic uint64_t g_threshold_ns;

// A job-clock reading as CLOCK_MONOTONIC ns. For the watchdog thread only, one caller at a time (it may recalibrate
// the tick length, three values that are not updated together); no lock, allocation or system call beyond vDSO
// clock reads. The tick length is recalibrated against the pair of at least a second ago, which also follows NTP's
// slewing of CLOCK_MONOTONIC, and the workers' multiplier and threshold follow it.
static uint64_t ticks_to_ns(uint64_t ticks);
static void set_threshold_ticks(void);

static uint64_t ticks_to_ns(uint64_t ticks) {
#if defined(__x86_64__)
    if (g_clock.tsc) {
        uint64_t now_tick, now_ns;
        clock_pair(&now_tick, &now_ns);
        uint64_t base_ns = atomic_load_explicit(&g_clock.base_ns, memory_order_relaxed);
        uint64_t base_tick = atomic_load_explicit(&g_clock.base_tick, memory_order_relaxed);
        if (now_ns >= base_ns + 1000000000ull && now_tick > base_tick) {
            set_ns_per_tick((double)(now_ns - base_ns) / (double)(now_tick - base_tick));
            atomic_store_explicit(&g_clock.base_tick, now_tick, memory_order_relaxed);
            atomic_store_explicit(&g_clock.base_ns, now_ns, memory_order_relaxed);
            set_threshold_ticks();
        }
        // A job begun on a CPU whose TSC reads a hair ahead of this one's: it began now.
        if (ticks >= now_tick) return now_ns;
        uint64_t elapsed = (uint64_t)((double)(now_tick - ticks) * ns_per_tick());
        return elapsed < now_ns ? now_ns - elapsed : 0;
    }
#endif
    return ticks;
}

// MARK: - Worker registration (once per thread; NOT async-signal-safe)

// The thread-exit destructor: the probe is given back, after any pin the watchdog holds, so the tid is never
// signalled once this thread is gone. The wait has no bound of its own on purpose (giving the probe back under a pin
// would let a dead tid be signalled); the watchdog holds a pin for one capture at a time, which its capture timeout
// bounds (at most 5 s).
static void worker_exited(void *value) {
    worker_probe *probe = value;
    t_probe = &g_unwatched;
    t_stats = NULL;  // a job run by a later destructor of this thread is not stamped into a freed probe
    if (probe == NULL || probe == &g_unwatched) return;
    for (;;) {
        uint32_t state = atomic_load_explicit(&probe->state, memory_order_acquire);
        if ((state & PROBE_PINNED) == 0) {
            if (atomic_compare_exchange_weak_explicit(&probe->state, &state, PROBE_EXITING, memory_order_acq_rel,
                                                      memory_order_acquire)) {
                break;
            }
            continue;
        }
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
    }
    uint64_t sequence = atomic_load_explicit(&probe->sequence, memory_order_relaxed);
    atomic_fetch_add_explicit(&g_state.jobs_of_exited_workers, sequence / 2, memory_order_relaxed);
    atomic_store_explicit(&probe->tid, 0, memory_order_relaxed);
    atomic_store_explicit(&probe->state, PROBE_FREE, memory_order_release);
}

static worker_probe *register_worker(void) {
    worker_probe *claimed = &g_unwatched;
    for (int index = 0; index < CSTALLMON_MAX_WORKERS; index++) {
        worker_probe *probe = &g_state.probes[index];
        uint32_t expected = PROBE_FREE;
        if (atomic_compare_exchange_strong_explicit(&probe->state, &expected, PROBE_CLAIMING, memory_order_acq_rel,
                                                    memory_order_relaxed)) {
            claimed = probe;
            int used = atomic_load_explicit(&g_state.probes_used, memory_order_relaxed);
            while (used < index + 1 &&
                   !atomic_compare_exchange_weak_explicit(&g_state.probes_used, &used, index + 1,
                                                          memory_order_release, memory_order_relaxed)) {
            }
            break;
        }
    }
    if (claimed != &g_unwatched) {
        // A new thread in the probe: its count starts again (the old thread's jobs were added up at its exit). Its
        // statistics go on from the previous thread's: they are cumulative per probe, read as differences.
        if (atomic_load_explicit(&claimed->stats, memory_order_relaxed) == NULL) {
            atomic_store_explicit(&claimed->stats, calloc(1, sizeof(struct worker_stats)), memory_order_release);
        }
        atomic_store_explicit(&claimed->sequence, 0, memory_order_relaxed);
        atomic_store_explicit(&claimed->long_job, 0, memory_order_relaxed);
        atomic_store_explicit(&claimed->tid, (int32_t)syscall(SYS_gettid), memory_order_relaxed);
        atomic_store_explicit(&claimed->thread, (uintptr_t)pthread_self(), memory_order_relaxed);
        atomic_fetch_add_explicit(&claimed->generation, 1, memory_order_release);
        // Alive only now, with this thread's tid and generation in place: a pin taken from here on is for this
        // thread, never for the probe's previous one.
        atomic_store_explicit(&claimed->state, PROBE_ALIVE, memory_order_release);
        int signal_number = atomic_load_explicit(&g_state.sampling_signal, memory_order_relaxed);
        if (signal_number > 0) {
            // libdispatch blocks nearly every signal on its workers; the sampling signal must reach this one.
            sigset_t set;
            sigemptyset(&set);
            sigaddset(&set, signal_number);
            pthread_sigmask(SIG_UNBLOCK, &set, NULL);
        }
        if (pthread_setspecific(g_state.exit_key, claimed) != 0) {
            // Without the exit destructor the probe would outlive its thread: give it back, run unwatched.
            atomic_store_explicit(&claimed->tid, 0, memory_order_relaxed);
            atomic_store_explicit(&claimed->state, PROBE_FREE, memory_order_release);
            claimed = &g_unwatched;
        }
    }
    t_probe = claimed;
    t_stats = claimed == &g_unwatched ? NULL : atomic_load_explicit(&claimed->stats, memory_order_relaxed);
    return claimed;
}

// MARK: - Running a job (the worker's hot path)

static inline __attribute__((always_inline)) void run_job(swift_job *job, uint32_t where) {
    if (where == JOB_ON_MAIN_ACTOR) {
        serial_executor_ref main_executor = swift_task_getMainExecutor();
        swift_job_run(job, main_executor.identity, main_executor.implementation);
    } else {
        swift_job_run(job, NULL, 0);
    }
}

// A job begins on the worker of `probe`: its attributes and start in the probe, then the odd sequence. Returns the
// sequence before the job, for `stamp_end`.
static inline __attribute__((always_inline)) uint64_t stamp_begin(worker_probe *probe, uint32_t attributes,
                                                                 uint64_t task_id, uintptr_t job, uint64_t *begin) {
    uint64_t sequence = atomic_load_explicit(&probe->sequence, memory_order_relaxed);
    *begin = job_clock_now();
    // The previous job's even sequence must be visible before this job's fields (a seqlock writer; on x86 only a
    // compiler barrier).
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&probe->job_attributes, attributes, memory_order_relaxed);
    atomic_store_explicit(&probe->job, job, memory_order_relaxed);
    atomic_store_explicit(&probe->task_id, task_id, memory_order_relaxed);
    atomic_store_explicit(&probe->job_since, *begin, memory_order_relaxed);
    atomic_store_explicit(&probe->sequence, sequence + 1, memory_order_release);
    return sequence;
}

// The job ended at `end`: a long one leaves its exact begin and end in the record, then the sequence is even again.
static inline __attribute__((always_inline)) void stamp_end(worker_probe *probe, uint64_t sequence, uint64_t begin,
                                                           uint64_t end, bool ran_long) {
    if (__builtin_expect(ran_long, 0)) {
        uint64_t long_sequence = atomic_load_explicit(&probe->long_sequence, memory_order_relaxed);
        atomic_store_explicit(&probe->long_sequence, long_sequence + 1, memory_order_relaxed);
        atomic_thread_fence(memory_order_release);
        atomic_store_explicit(&probe->long_job, (sequence + 2) / 2, memory_order_relaxed);
        atomic_store_explicit(&probe->long_begin, begin, memory_order_relaxed);
        atomic_store_explicit(&probe->long_end, end, memory_order_relaxed);
        atomic_store_explicit(&probe->long_sequence, long_sequence + 2, memory_order_release);
    }
    atomic_store_explicit(&probe->sequence, sequence + 2, memory_order_release);
}

static inline __attribute__((always_inline)) void count(uint64_t *counter, uint64_t amount) {
    __atomic_store_n(counter, __atomic_load_n(counter, __ATOMIC_RELAXED) + amount, __ATOMIC_RELAXED);
}

// The pool class of a job: the main actor, or the global executor's priority band (unspecified counts as medium).
static inline __attribute__((always_inline)) unsigned pool_class(uint8_t priority, uint32_t where) {
    if (where == JOB_ON_MAIN_ACTOR) return CSTALLMON_POOL_MAIN;
    if (priority >= 0x19) return CSTALLMON_POOL_HIGH;
    if (priority >= 0x15 || priority == 0) return CSTALLMON_POOL_MEDIUM;
    if (priority >= 0x11) return CSTALLMON_POOL_LOW;
    return CSTALLMON_POOL_BACKGROUND;
}

// After the job: its run time and queue delay into the worker's statistics (relaxed loads and stores, one writer).
static inline __attribute__((always_inline)) void record_job(struct worker_stats *stats, unsigned pool, uint64_t enqueued,
                                                            uint64_t begin, uint64_t end, bool ran_long,
                                                            uint64_t threshold) {
    if (__builtin_expect(stats == NULL, 0)) return;
    class_stats *counts = &stats->classes[pool];
    // An end a hair before the begin (TSCs of two CPUs read a hair apart, were the worker moved) ran for nothing.
    uint64_t run = end > begin ? ticks_length_ns(end - begin) : 0;
    // A job due later than it began (a clock read a hair apart on another CPU) waited for nothing.
    uint64_t waited = begin > enqueued ? begin - enqueued : 0;
    uint64_t delay = ticks_length_ns(waited);
    cstallmon_histogram_record(counts->run, run);
    cstallmon_histogram_record(counts->delay, delay);
    count(&counts->jobs, 1);
    count(&counts->run_ns, run);
    count(&counts->delay_ns, delay);
    if (__builtin_expect(ran_long, 0)) count(&counts->slow_jobs, 1);
    if (__builtin_expect(waited >= threshold, 0)) count(&counts->long_delays, 1);
}

// What a worker knows of a job between its begin and its end.
typedef struct {
    uint64_t sequence;
    uint64_t begin;
    uint64_t enqueued;
    unsigned pool;
} job_timing;

// Before the job runs (it may be freed the moment it finishes): its header read, its begin stamped.
static inline __attribute__((always_inline)) job_timing job_begins(worker_probe *probe, const uint8_t *header,
                                                                  uint32_t where, uint64_t task_id) {
    job_timing timing;
    uint32_t attributes = (uint32_t)header[JOB_KIND] | (uint32_t)header[JOB_PRIORITY] << 8 | where;
    timing.pool = pool_class(header[JOB_PRIORITY], where);
    timing.enqueued = *(const uint64_t *)(header + JOB_SCHEDULER_PRIVATE_0);
    if (__builtin_expect(header[JOB_KIND] == 0 && (header[JOB_FLAGS_TOP] & JOB_TOP_HAS_TASK_NAME), 0)) {
        attributes |= JOB_NAMED_TASK;  // a named task (rare): the watchdog reads its name only if this job stalls
    }
    timing.sequence = stamp_begin(probe, attributes, task_id, (uintptr_t)header, &timing.begin);
    return timing;
}

// After the job (the worker's hot path; async-signal-safe: relaxed atomics and a clock read): its end stamped, then
// counted. With pool_statistics = off, a job no reader saw running ends with the even sequence alone (no clock
// read): it cannot have become a stall, since a stall begins only on a reading of the job running, and that reading
// marks it (cstallmon_worker_read). A job seen running reads the end as always, and leaves its exact begin and end
// if it ran long. (A job that ends between the reading and its mark, nanoseconds apart unless the watchdog is
// preempted there, ends unmarked: a stall begun on that reading is still reported, with the end the watchdog saw.)
static inline __attribute__((always_inline)) void job_ends(worker_probe *probe, struct worker_stats *stats,
                                                          job_timing timing) {
    if (__builtin_expect(!atomic_load_explicit(&g_state.statistics, memory_order_relaxed), 0) &&
        atomic_load_explicit(&probe->seen_running, memory_order_relaxed) != timing.sequence + 1) {
        stamp_end(probe, timing.sequence, timing.begin, 0, false);
        return;
    }
    uint64_t end = job_clock_now();
    uint64_t threshold = atomic_load_explicit(&g_state.threshold_ticks, memory_order_relaxed);
    bool ran_long = end - timing.begin >= threshold && end > timing.begin;
    stamp_end(probe, timing.sequence, timing.begin, end, ran_long);
    if (__builtin_expect(atomic_load_explicit(&g_state.statistics, memory_order_relaxed), 1)) {
        record_job(stats, timing.pool, timing.enqueued, timing.begin, end, ran_long, threshold);
    }
}

static inline __attribute__((always_inline)) void run_timed(swift_job *job, uint32_t where) {
    if (__builtin_expect(t_depth > 0, 0)) {  // inside another job of this thread, which is the one timed
        t_depth++;
        run_job(job, where);
        t_depth--;
        return;
    }
    worker_probe *probe = t_probe;
    if (__builtin_expect(probe == NULL, 0)) probe = register_worker();
    job_timing timing = job_begins(probe, (const uint8_t *)job, where, swift_task_getJobTaskId(job));
    t_depth = 1;
    run_job(job, where);
    t_depth = 0;
    job_ends(probe, t_stats, timing);
}

// The two job runners live in a section of their own, so that the watchdog can tell their frames by address (the
// linker defines __start_/__stop_ of a section named like a C identifier), in a static build as in a dynamic one:
// the await chain's reader counts from there to the job's first frame (await_chain.c).
#define JOB_RUNNERS __attribute__((section("cstallmon_job_runners"), noinline))

JOB_RUNNERS static void cstallmon_run_timed_job(void *context) {
    run_timed(context, 0);
}

// A main-actor job, on the main queue: run on the main executor, as the runtime's own main executor runs it.
JOB_RUNNERS static void cstallmon_run_timed_main_job(void *context) {
    run_timed(context, JOB_ON_MAIN_ACTOR);
}

extern const char __start_cstallmon_job_runners[] __attribute__((visibility("hidden")));
extern const char __stop_cstallmon_job_runners[] __attribute__((visibility("hidden")));

bool cstallmon_in_job_runner(uintptr_t address) {
    return address >= (uintptr_t)__start_cstallmon_job_runners && address < (uintptr_t)__stop_cstallmon_job_runners;
}

void cstallmon_job_runner_range(uintptr_t *start, uintptr_t *end) {
    *start = (uintptr_t)__start_cstallmon_job_runners;
    *end = (uintptr_t)__stop_cstallmon_job_runners;
}

void cstallmon_concurrency_enqueue_main(void *job) {
    // As the runtime's dispatch main executor: marks the job as enqueued on the main queue.
    *(void **)((uint8_t *)job + JOB_SCHEDULER_PRIVATE_1) = &_dispatch_main_q;
    if (atomic_load_explicit(&g_state.statistics, memory_order_relaxed)) {
        *(uint64_t *)((uint8_t *)job + JOB_SCHEDULER_PRIVATE_0) = job_clock_now();
    }
    dispatch_async_f(&_dispatch_main_q, job, cstallmon_run_timed_main_job);
}

// MARK: - The hooks (any thread that enqueues a job)

// The runtime's getGlobalQueue: one concurrent queue per priority, as wide as the machine has logical CPUs.
static dispatch_queue_t queue_for(uint8_t priority) {
    if (priority >= PRIORITY_COUNT) priority = 0;
    dispatch_queue_t queue = atomic_load_explicit(&g_state.queues[priority], memory_order_acquire);
    if (__builtin_expect(queue != NULL, 1)) return queue;
    dispatch_queue_attr_t attributes =
        dispatch_queue_attr_make_with_qos_class(&_dispatch_queue_attr_concurrent, priority, 0);
    dispatch_queue_t created = dispatch_queue_create("Swift global concurrent queue (stallmon)", attributes);
    dispatch_queue_set_width(created, QUEUE_WIDTH_LOGICAL_CPUS);
    dispatch_queue_t expected = NULL;
    if (!atomic_compare_exchange_strong_explicit(&g_state.queues[priority], &expected, created, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        // Another thread created it first: this one stays unused (dispatch queues are never freed by the runtime
        // either; a lost race costs one empty queue, once).
        return expected;
    }
    return created;
}

static uint8_t job_priority(swift_job *job) {
    return ((const uint8_t *)job)[JOB_PRIORITY];
}

// As the runtime's dispatchEnqueue: marks the job as enqueued on the global executor. Also stamps when it is due
// (now, or after `delay_ns`), for its queue delay.
static void prepare(swift_job *job, uint64_t delay_ns) {
    *(void **)((uint8_t *)job + JOB_SCHEDULER_PRIVATE_1) = (void *)1;
    if (!atomic_load_explicit(&g_state.statistics, memory_order_relaxed)) return;  // no queue delay counted
    uint64_t due = job_clock_now();
    // A delay past what the clock scales (a "sleep forever") is due never: no queue delay is counted for it.
    if (delay_ns > 0) due = delay_ns > MAX_SCALED_NS ? UINT64_MAX : due + ns_to_ticks(delay_ns);
    *(uint64_t *)((uint8_t *)job + JOB_SCHEDULER_PRIVATE_0) = due;
}

static SWIFTCC void cstallmon_enqueue_global(swift_job *job, enqueue_global_original original) {
    (void)original;
    prepare(job, 0);
    dispatch_async_f(queue_for(job_priority(job)), job, cstallmon_run_timed_job);
}

static void cstallmon_enqueue_after(int64_t delay_ns, swift_job *job) {
    prepare(job, delay_ns > 0 ? (uint64_t)delay_ns : 0);
    dispatch_queue_t queue = queue_for(job_priority(job));
    if (delay_ns <= 0) {
        dispatch_async_f(queue, job, cstallmon_run_timed_job);
    } else {
        dispatch_after_f(dispatch_time(DISPATCH_TIME_NOW, delay_ns), queue, job, cstallmon_run_timed_job);
    }
}

static SWIFTCC void cstallmon_enqueue_with_delay(unsigned long long delay, swift_job *job, enqueue_delay_original original) {
    (void)original;
    if (delay > (unsigned long long)INT64_MAX) {
        prepare(job, UINT64_MAX);
        dispatch_after_f(DISPATCH_TIME_FOREVER, queue_for(job_priority(job)), job, cstallmon_run_timed_job);
        return;
    }
    cstallmon_enqueue_after((int64_t)delay, job);
}

// A deadline on the job's own clock becomes a delay from now on that clock (the tolerance is not used: the job
// runs on time rather than up to the tolerance late). A clock this code does not know goes to the runtime.
static SWIFTCC void cstallmon_enqueue_with_deadline(long long sec, long long nsec, long long tsec, long long tnsec, int clock,
                                          swift_job *job, enqueue_deadline_original original) {
    (void)tsec;
    (void)tnsec;
    if (clock != SWIFT_CLOCK_CONTINUOUS && clock != SWIFT_CLOCK_SUSPENDING) {
        original(sec, nsec, tsec, tnsec, clock, job);
        return;
    }
    long long now_sec = 0, now_nsec = 0;
    swift_get_time(&now_sec, &now_nsec, clock);
    __int128 delay = ((__int128)sec - now_sec) * 1000000000 + ((__int128)nsec - now_nsec);
    if (delay <= 0) {
        cstallmon_enqueue_after(0, job);  // due already (or long ago: no narrowing of a huge negative delay)
        return;
    }
    if (delay > INT64_MAX) {
        prepare(job, UINT64_MAX);
        dispatch_after_f(DISPATCH_TIME_FOREVER, queue_for(job_priority(job)), job, cstallmon_run_timed_job);
        return;
    }
    cstallmon_enqueue_after((int64_t)delay, job);
}

// MARK: - Install

// A compare-and-swap from NULL (async-signal-safe).
static bool swap_hook(void **variable, void *hook) {
    void *expected = NULL;
    return __atomic_compare_exchange_n(variable, &expected, hook, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

// Puts NULL back only where `hook` is still what the variable holds (async-signal-safe).
static void unswap_hook(void **variable, void *hook) {
    void *expected = hook;
    __atomic_compare_exchange_n(variable, &expected, NULL, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

// The global hook goes first because it is the one another party (NIO's executor take-over) is likely to hold: when
// it is taken, nothing of ours was ever set and no job went through this target. Only then the delayed ones: were
// they set first, a job enqueued through them in the window before a refused global hook would run through this
// target later (cstallmon_run_timed_job registers its worker with the exit key), after the install had given up.
// Async-signal-safe (compare-and-swaps only).
int cstallmon_concurrency_swap_hooks(void **global, void **delay, void **deadline, unsigned *ever_set) {
    enqueue_global_hook global_hook = cstallmon_enqueue_global;
    enqueue_delay_hook delay_hook = cstallmon_enqueue_with_delay;
    enqueue_deadline_hook deadline_hook = cstallmon_enqueue_with_deadline;
    unsigned set = 0;
    int outcome = CSTALLMON_HOOKS_SET;
    if (!swap_hook(global, (void *)global_hook)) {
        outcome = CSTALLMON_HOOKS_GLOBAL_TAKEN;
    } else {
        set |= 1;
        if (!swap_hook(delay, (void *)delay_hook)) {
            outcome = CSTALLMON_HOOKS_ROLLED_BACK;
        } else {
            set |= 2;
            if (!swap_hook(deadline, (void *)deadline_hook)) {
                outcome = CSTALLMON_HOOKS_ROLLED_BACK;
            } else {
                set |= 4;
            }
        }
        if (outcome == CSTALLMON_HOOKS_ROLLED_BACK) {
            // The global hook first, so no new job takes our path; the delay hook after it.
            unswap_hook(global, (void *)global_hook);
            if (set & 2) unswap_hook(delay, (void *)delay_hook);
        }
    }
    if (ever_set != NULL) *ever_set = set;
    return outcome;
}

// NOT async-signal-safe (a mutex, a pthread key, the job clock's calibration).
cstallmon_concurrency_install_result cstallmon_concurrency_install(int sampling_signal, uint64_t threshold_ns) {
    void **global = &swift_task_enqueueGlobal_hook;
    void **delay = &swift_task_enqueueGlobalWithDelay_hook;
    void **deadline = &swift_task_enqueueGlobalWithDeadline_hook;
    if (global == NULL || delay == NULL || deadline == NULL) return CSTALLMON_CONCURRENCY_NO_HOOKS;
    // One install at a time: the key, the sampling signal and the job clock are set up before any hook is in, and a
    // second caller must not redo them under the first one's live hooks.
    pthread_mutex_lock(&g_state.install_lock);
    cstallmon_concurrency_install_result result = CSTALLMON_CONCURRENCY_INSTALLED;
    if (atomic_load_explicit(&g_state.installed, memory_order_acquire)) {
        result = CSTALLMON_CONCURRENCY_ALREADY;
    } else if (!g_state.exit_key_created && pthread_key_create(&g_state.exit_key, worker_exited) != 0) {
        result = CSTALLMON_CONCURRENCY_NO_HOOKS;
    } else {
        // The key is created once per process and never deleted, not even when the hooks are refused: a job queued
        // through one of ours before a rollback registers its worker with it later (pthread_setspecific), and a
        // deleted key's index may by then be another library's. A later install reuses it.
        g_state.exit_key_created = true;
        atomic_store_explicit(&g_state.sampling_signal, sampling_signal, memory_order_relaxed);
        job_clock_set_up();
        atomic_store_explicit(&g_threshold_ns, threshold_ns, memory_order_relaxed);
        set_threshold_ticks();
        if (cstallmon_concurrency_swap_hooks(global, delay, deadline, NULL) == CSTALLMON_HOOKS_SET) {
            atomic_store_explicit(&g_state.installed, 1, memory_order_release);
        } else {
            result = CSTALLMON_CONCURRENCY_HOOK_TAKEN;
        }
    }
    pthread_mutex_unlock(&g_state.install_lock);
    return result;
}

static void set_threshold_ticks(void) {
    atomic_store_explicit(&g_state.threshold_ticks,
                          ns_to_ticks(atomic_load_explicit(&g_threshold_ns, memory_order_relaxed)),
                          memory_order_relaxed);
}

static int concurrency_installed(void) {
    return atomic_load_explicit(&g_state.installed, memory_order_acquire);
}

void cstallmon_concurrency_set_statistics(int enabled) {
    atomic_store_explicit(&g_state.statistics, enabled ? 1 : 0, memory_order_relaxed);
}

int cstallmon_concurrency_statistics(void) {
    return atomic_load_explicit(&g_state.statistics, memory_order_relaxed);
}

void cstallmon_concurrency_configure(int sampling_signal, uint64_t threshold_ns) {
    atomic_store_explicit(&g_state.sampling_signal, sampling_signal, memory_order_relaxed);
    atomic_store_explicit(&g_threshold_ns, threshold_ns, memory_order_relaxed);
    set_threshold_ticks();
}

// MARK: - Reading (the watchdog thread; async-signal-safe)

// Async-signal-safe (one atomic load).
int cstallmon_workers_used(void) { return atomic_load_explicit(&g_state.probes_used, memory_order_acquire); }

int cstallmon_worker_read(int index, cstallmon_worker_reading *out) {
    memset(out, 0, sizeof *out);
    if (index < 0 || index >= CSTALLMON_MAX_WORKERS) return 0;
    worker_probe *probe = &g_state.probes[index];
    uint32_t state = atomic_load_explicit(&probe->state, memory_order_acquire);
    if (state == PROBE_FREE || state == PROBE_CLAIMING) return 0;
    out->state = (state & PROBE_EXITING) ? 2 : 1;
    out->generation = atomic_load_explicit(&probe->generation, memory_order_acquire);
    out->tid = atomic_load_explicit(&probe->tid, memory_order_relaxed);
    for (int attempt = 0; attempt < 64; attempt++) {
        uint64_t before = atomic_load_explicit(&probe->sequence, memory_order_acquire);
        uint64_t since = atomic_load_explicit(&probe->job_since, memory_order_relaxed);
        uint64_t task_id = atomic_load_explicit(&probe->task_id, memory_order_relaxed);
        uint32_t attributes = atomic_load_explicit(&probe->job_attributes, memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        uint64_t after = atomic_load_explicit(&probe->sequence, memory_order_relaxed);
        if (before == after) {
            // Seen running: the worker reads this job's end (pool_statistics = off; see job_ends).
            if ((before & 1) && atomic_load_explicit(&probe->seen_running, memory_order_relaxed) != before) {
                atomic_store_explicit(&probe->seen_running, before, memory_order_relaxed);
            }
            out->sequence = before;
            out->job_since = (before & 1) ? ticks_to_ns(since) : since;
            out->task_id = task_id;
            out->kind = (uint8_t)(attributes & 0xFF);
            out->priority = (uint8_t)(attributes >> 8);
            out->main_actor = (attributes & JOB_ON_MAIN_ACTOR) ? 1 : 0;
            out->named_task = (before & 1) && (attributes & JOB_NAMED_TASK) ? 1 : 0;
            return 1;
        }
    }
    // The worker runs jobs back to back faster than this reads: say it is between jobs.
    out->sequence = atomic_load_explicit(&probe->sequence, memory_order_relaxed) & ~1ull;
    return 1;
}

int cstallmon_worker_long_job(int index, uint64_t job, uint64_t *begin, uint64_t *end) {
    if (index < 0 || index >= CSTALLMON_MAX_WORKERS) return 0;
    worker_probe *probe = &g_state.probes[index];
    for (int attempt = 0; attempt < 64; attempt++) {
        uint64_t before = atomic_load_explicit(&probe->long_sequence, memory_order_acquire);
        if (before & 1) continue;
        uint64_t recorded = atomic_load_explicit(&probe->long_job, memory_order_relaxed);
        uint64_t recorded_begin = atomic_load_explicit(&probe->long_begin, memory_order_relaxed);
        uint64_t recorded_end = atomic_load_explicit(&probe->long_end, memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&probe->long_sequence, memory_order_relaxed) != before) continue;
        if (recorded != job) return 0;
        // Converted from the end, which is recent: only the job's own length is scaled by the tick length.
        *end = ticks_to_ns(recorded_end);
#if defined(__x86_64__)
        if (g_clock.tsc) {
            uint64_t length = (uint64_t)((double)(recorded_end - recorded_begin) * ns_per_tick());
            *begin = length < *end ? *end - length : 0;
            return 1;
        }
#endif
        *begin = recorded_begin;
        return 1;
    }
    return 0;
}

int cstallmon_worker_pin(int index, uint32_t generation) {
    if (index < 0 || index >= CSTALLMON_MAX_WORKERS) return 0;
    worker_probe *probe = &g_state.probes[index];
    uint32_t expected = PROBE_ALIVE;
    if (!atomic_compare_exchange_strong_explicit(&probe->state, &expected, PROBE_ALIVE | PROBE_PINNED,
                                                 memory_order_acq_rel, memory_order_acquire)) {
        return 0;
    }
    // Pinned: the thread cannot finish exiting now. Still the worker this caller means?
    if (atomic_load_explicit(&probe->generation, memory_order_acquire) != generation) {
        cstallmon_worker_unpin(index);
        return 0;
    }
    return 1;
}

void cstallmon_worker_unpin(int index) {
    if (index < 0 || index >= CSTALLMON_MAX_WORKERS) return;
    atomic_fetch_and_explicit(&g_state.probes[index].state, ~(uint32_t)PROBE_PINNED, memory_order_release);
}

uint64_t cstallmon_concurrency_measure_stamps(uint64_t iterations) {
    static worker_probe scratch;
    static struct worker_stats scratch_stats;
    job_clock_set_up();
    if (!concurrency_installed()) {  // as an installed monitor would have it: 100 ms
        atomic_store_explicit(&g_threshold_ns, 100000000, memory_order_relaxed);
        set_threshold_ticks();
    }
    // A job header as the runtime lays it out: a medium-priority task without a name.
    _Alignas(16) uint8_t job[0x30] = {0};
    job[JOB_PRIORITY] = 0x15;
    job[JOB_FLAGS_TOP] = 0x02;
    uint64_t start = cstallmon_clock_monotonic_ns();
    for (uint64_t index = 0; index < iterations; index++) {
        // As the enqueue hook and run_timed: the enqueue stamp, the TLS probe, the header read, the stamps and the
        // statistics around an empty job (not swift_task_getJobTaskId, which needs a real job).
        if (atomic_load_explicit(&g_state.statistics, memory_order_relaxed)) {
            *(uint64_t *)(job + JOB_SCHEDULER_PRIVATE_0) = job_clock_now();
        }
        __asm__ volatile("" ::: "memory");  // the queue
        worker_probe *volatile current = t_probe;
        (void)current;
        job_timing timing = job_begins(&scratch, job, 0, index);
        __asm__ volatile("" ::: "memory");  // the job
        job_ends(&scratch, &scratch_stats, timing);
    }
    return cstallmon_clock_monotonic_ns() - start;
}

// MARK: - The running job (the watchdog thread; async-signal-safe)

bool cstallmon_worker_job(int index, uint64_t sequence, uintptr_t *job, uint32_t *attributes) {
    if (index < 0 || index >= CSTALLMON_MAX_WORKERS || (sequence & 1) == 0) return false;
    worker_probe *probe = &g_state.probes[index];
    if (atomic_load_explicit(&probe->sequence, memory_order_acquire) != sequence) return false;
    *attributes = atomic_load_explicit(&probe->job_attributes, memory_order_relaxed);
    *job = atomic_load_explicit(&probe->job, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    return atomic_load_explicit(&probe->sequence, memory_order_relaxed) == sequence;
}

uint64_t cstallmon_job_task_id(uintptr_t job) {
    return swift_task_getJobTaskId((swift_job *)job);
}

bool cstallmon_worker_thread(int index, uintptr_t *thread) {
    if (index < 0 || index >= CSTALLMON_MAX_WORKERS) return false;
    *thread = atomic_load_explicit(&g_state.probes[index].thread, memory_order_relaxed);
    return *thread != 0;
}

int cstallmon_running_job_kind(void) {
    worker_probe *probe = t_probe;
    if (probe == NULL || probe == &g_unwatched) return -1;
    if ((atomic_load_explicit(&probe->sequence, memory_order_relaxed) & 1) == 0) return -1;
    return (int)(atomic_load_explicit(&probe->job_attributes, memory_order_relaxed) & 0xFF);
}

bool cstallmon_worker_still_runs(int index, uint64_t sequence) {
    atomic_thread_fence(memory_order_acquire);
    return atomic_load_explicit(&g_state.probes[index].sequence, memory_order_relaxed) == sequence;
}

// MARK: - The canary (the watchdog thread sends it; a worker runs it)

// A job-sized work item on the medium-priority queue, sent by the watchdog only while every worker it knows of is
// busy: how long it waits to begin is how long a new job waits for a worker right now. Not a Swift job (no task,
// no probe stamps): the worker that runs it stores one clock read.
static struct {
    _Atomic int outstanding;
    _Atomic uint64_t sent;     // job-clock ticks
    _Atomic uint64_t started;  // job-clock ticks; 0 until it ran
} g_canary;

static void cstallmon_canary_run(void *context) {
    (void)context;
    atomic_store_explicit(&g_canary.started, job_clock_now(), memory_order_relaxed);
    atomic_store_explicit(&g_canary.outstanding, 0, memory_order_release);
}

int cstallmon_concurrency_send_canary(void) {
    if (!concurrency_installed()) return 0;
    int expected = 0;
    if (!atomic_compare_exchange_strong_explicit(&g_canary.outstanding, &expected, 1, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        return 0;
    }
    atomic_store_explicit(&g_canary.started, 0, memory_order_relaxed);
    atomic_store_explicit(&g_canary.sent, job_clock_now(), memory_order_relaxed);
    dispatch_async_f(queue_for(0x15), NULL, cstallmon_canary_run);
    return 1;
}

int cstallmon_concurrency_canary(uint64_t *sent_ns, uint64_t *started_ns) {
    int outstanding = atomic_load_explicit(&g_canary.outstanding, memory_order_acquire);
    uint64_t sent = atomic_load_explicit(&g_canary.sent, memory_order_relaxed);
    uint64_t started = atomic_load_explicit(&g_canary.started, memory_order_relaxed);
    if (sent == 0) return -1;
    *sent_ns = ticks_to_ns(sent);
    *started_ns = outstanding ? 0 : ticks_to_ns(started);
    return outstanding ? 1 : 0;
}

// MARK: - Statistics (the watchdog thread)

int cstallmon_pool_class_of(uint8_t priority, uint8_t main_actor) {
    return (int)pool_class(priority, main_actor ? JOB_ON_MAIN_ACTOR : 0);
}

int cstallmon_pool_stats(int pool, cstallmon_pool_totals *out, uint64_t *run_buckets, uint64_t *delay_buckets,
                         size_t bucket_count) {
    memset(out, 0, sizeof *out);
    if (pool < 0 || pool >= CSTALLMON_POOL_CLASSES || bucket_count != CSTALLMON_HISTOGRAM_BUCKETS) return 0;
    memset(run_buckets, 0, bucket_count * sizeof *run_buckets);
    memset(delay_buckets, 0, bucket_count * sizeof *delay_buckets);
    for (int index = 0; index < cstallmon_workers_used(); index++) {
        struct worker_stats *stats = atomic_load_explicit(&g_state.probes[index].stats, memory_order_acquire);
        if (stats == NULL) continue;
        const class_stats *counts = &stats->classes[pool];
        for (size_t bucket = 0; bucket < bucket_count; bucket++) {
            run_buckets[bucket] += cstallmon_histogram_count(counts->run, (uint32_t)bucket);
            delay_buckets[bucket] += cstallmon_histogram_count(counts->delay, (uint32_t)bucket);
        }
        out->jobs += __atomic_load_n(&counts->jobs, __ATOMIC_RELAXED);
        out->run_ns += __atomic_load_n(&counts->run_ns, __ATOMIC_RELAXED);
        out->delay_ns += __atomic_load_n(&counts->delay_ns, __ATOMIC_RELAXED);
        out->slow_jobs += __atomic_load_n(&counts->slow_jobs, __ATOMIC_RELAXED);
        out->long_delays += __atomic_load_n(&counts->long_delays, __ATOMIC_RELAXED);
    }
    return 1;
}

uint64_t cstallmon_concurrency_jobs(void) {
    uint64_t total = atomic_load_explicit(&g_state.jobs_of_exited_workers, memory_order_relaxed);
    for (int index = 0; index < cstallmon_workers_used(); index++) {
        worker_probe *probe = &g_state.probes[index];
        uint32_t state = atomic_load_explicit(&probe->state, memory_order_acquire);
        if (state == PROBE_FREE || state == PROBE_CLAIMING) continue;
        total += atomic_load_explicit(&probe->sequence, memory_order_relaxed) / 2;
    }
    return total;
}
