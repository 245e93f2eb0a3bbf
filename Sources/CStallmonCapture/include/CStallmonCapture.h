#ifndef C_STALLMON_CAPTURE_H
#define C_STALLMON_CAPTURE_H

// Stack capture of another thread of this process, by signal.
//
// The watchdog thread asks for a capture of a monitored thread: it arms that thread's slot, sends it the sampling
// signal with tgkill, and waits (bounded) for the handler, running on the target thread, to unwind from the
// interrupted context with libunwind into the slot's preallocated frame buffer.
//
// Why a slot state machine: a handler that has not finished (the thread blocks the signal, is stopped by a debugger,
// or is descheduled) may still run later. The slot remembers that, and no second signal is sent to that thread until
// the late handler has drained the slot; the capture reports CSTALLMON_CAPTURE_PENDING meanwhile.
//
// All state lives in static storage: no handler can ever point at freed memory, whatever the Swift side does.
// Each function says whether it is async-signal-safe.

#include "CStallmonMeasure.h"
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Frames one capture stores at most; deeper stacks are truncated (the outermost frames are dropped).
#define CSTALLMON_MAX_FRAMES 256
/// Capture slots come in blocks of this many: the first is static, the others are mapped when every slot is taken
/// (never unmapped: a late handler may still read them).
#define CSTALLMON_SLOTS_PER_BLOCK 64
/// Blocks of slots at most.
#define CSTALLMON_MAX_SLOT_BLOCKS 64
/// Threads that can be captured at once in one process (loop threads, pool workers, lock holders being sampled).
#define CSTALLMON_MAX_SLOTS (CSTALLMON_SLOTS_PER_BLOCK * CSTALLMON_MAX_SLOT_BLOCKS)

typedef enum {
    /// Frames captured.
    CSTALLMON_CAPTURE_OK = 0,
    /// The handler did not finish within the wait; the slot stays reserved until it does.
    CSTALLMON_CAPTURE_TIMED_OUT = 1,
    /// A signal sent earlier may still be pending on this thread: not signalled again.
    CSTALLMON_CAPTURE_PENDING = 2,
    /// tgkill failed (errno in `error_number`; ESRCH: the thread is gone).
    CSTALLMON_CAPTURE_SIGNAL_FAILED = 3,
    /// No handler installed, or the slot is not in use.
    CSTALLMON_CAPTURE_NOT_READY = 4,
    /// libunwind could not start from the signal context (its error code in `error_number`).
    CSTALLMON_CAPTURE_UNWIND_FAILED = 5,
    /// The thread was inside the dynamic loader (dlopen, dlclose, dl_iterate_phdr) and may hold its lock, which the
    /// unwinder needs: not unwound, to avoid a deadlock. The next sample tries again.
    CSTALLMON_CAPTURE_IN_LOADER = 6,
} cstallmon_capture_status;

/// What one capture did. Times are CLOCK_MONOTONIC nanoseconds.
typedef struct {
    int32_t status;              ///< a cstallmon_capture_status
    int32_t error_number;        ///< errno or libunwind error for SIGNAL_FAILED / UNWIND_FAILED
    uint32_t frame_count;        ///< frames written to the caller's buffer
    uint32_t truncated;          ///< 1 when the stack was deeper than the buffer
    uint32_t handler_replaced;   ///< 1 when the signal's handler is no longer ours: nothing was sent (SIGNAL_FAILED)
    uint32_t unknown_image;      ///< 1 when the stack reached code in no known image; its last frame is that code
    uint32_t has_frame_pointers; ///< 1 when the caller's `frame_pointers` were filled, one per frame
    uint32_t job_frame;          ///< with frame pointers: the async job's first frame, or UINT32_MAX
    uintptr_t job_context;       ///< the async context below that frame's frame pointer, read by the handler
    uintptr_t recorded_word;     ///< the word at the capture's `word_address`, read by the handler (0: none)
    uint64_t pointed_word;       ///< the 8 bytes at `recorded_word` + `pointed_offset`, read by the handler (0: none)
    uint64_t signal_sent_ns;     ///< just before tgkill
    uint64_t handler_entered_ns; ///< first instruction of the handler's work on the target thread
    uint64_t handler_done_ns;    ///< the handler published its frames
} cstallmon_capture_result;

/// Installs the sampling handler on `signal_number` with SA_SIGINFO|SA_RESTART|SA_ONSTACK and sets libunwind's
/// caching policy: its global register-state cache on when the handler unwinds with stallmon's image table and the
/// loader's list lock was found (no holder of its mutex then waits for the loader: outside the handler the lock is
/// only tried); off otherwise. The handler allocates
/// nothing. Idempotent for the same signal (reference counted).
/// Returns 0, or -1 and a human-readable reason in `error_buffer` when the signal already has a handler that is not
/// ours (named in the message), when stallmon already owns a different signal in this process, or sigaction fails.
/// NOT async-signal-safe (takes a mutex).
int cstallmon_install(int signal_number, char *error_buffer, size_t error_buffer_size);

/// Drops one reference taken by cstallmon_install. The handler itself stays installed for the life of the process:
/// a late signal must find a handler, never the default action (which would terminate the process).
/// NOT async-signal-safe.
void cstallmon_release(void);

/// The signal stallmon owns in this process, or 0. Async-signal-safe.
int cstallmon_installed_signal(void);

/// 1 when cstallmon_install found glibc's loader list lock, so the handler skips exactly the samples of a thread
/// holding it (CSTALLMON_CAPTURE_IN_LOADER); 0 when it falls back to scanning the stack for loader return
/// addresses. Async-signal-safe.
int cstallmon_loader_lock_found(void);

/// 1 when the handler's unwinder reads stallmon's table of loaded images instead of calling the dynamic loader
/// (libunwind.so's reference to dl_iterate_phdr was pointed at it at install). Async-signal-safe.
int cstallmon_unwinder_uses_image_table(void);

/// Benchmarks and fault tests only: 1 makes the handler unwind through the loader (dl_iterate_phdr, guarded by the
/// in-loader check) as it did before the image table, to measure or provoke that path; 0 (the default) restores
/// the table. Async-signal-safe (one atomic store).
void cstallmon_set_unwind_through_loader(int enabled);

/// 1 when `address` lies in an executable segment of an image of the table the handler unwinds with (as of the
/// last capture's refresh). For tests and diagnostics. Async-signal-safe.
int cstallmon_image_table_contains(uintptr_t address);

/// Checks the handler's image table against the objects loaded now, as every capture does before it signals: an
/// image unloaded or replaced since the table was built (another object loaded at its address) is hidden from the
/// handler (a frame in it ends the stack, marked as in an unknown image) until the table is rebuilt. Returns 1 when
/// every image still matches, 0 when one did not. For tests and diagnostics. NOT async-signal-safe
/// (process_vm_readv); never waits for a lock.
int cstallmon_image_table_check(void);

/// The effective user id of the process at the other end of a connected AF_UNIX socket (SO_PEERCRED), or -1 with
/// errno. Async-signal-safe (one getsockopt).
int64_t cstallmon_socket_peer_uid(int fd);

/// accept4(fd, NULL, NULL, SOCK_CLOEXEC): a connection that no fork/exec of another thread inherits. Returns the
/// descriptor or -1 with errno. Async-signal-safe (one system call).
int cstallmon_accept_cloexec(int fd);

/// SIGRTMIN and SIGRTMAX, which are functions in glibc and so invisible to Swift. Async-signal-safe.
int cstallmon_sigrtmin(void);
int cstallmon_sigrtmax(void);

/// Reserves a capture slot for thread `tid`. Returns the slot index, or -1 when all slots are taken. A thread may
/// have several slots (its own monitor's, and one borrowed by another watchdog to sample it as a lock's holder);
/// a capture is never signalled while another slot of the same thread has a handler in flight or owed. Without
/// cstallmon_warm_up on the thread, its handler uses libunwind's plain unwinder (no per-thread cache to create).
/// NOT async-signal-safe.
int cstallmon_slot_acquire(pid_t tid);

/// Slots reserved now (for a warning that says why a thread got none). NOT async-signal-safe (takes a mutex).
int cstallmon_slots_in_use(void);

/// Returns a slot. If a signal may still be pending for it, the slot is retired instead of reused until that
/// late handler has run. Returns 1 when the slot is free now, 0 when it waits for that handler (see
/// cstallmon_slot_reap). NOT async-signal-safe.
int cstallmon_slot_release(int slot);

/// Captures the stack of the slot's thread into `frames` (at most `max_frames`), waiting at most `timeout_ns`.
/// Frame 0 is the interrupted program counter; later frames are return addresses. The handler's own frames and
/// the signal trampoline are never included. Call from one thread per slot at a time (the slot's watchdog).
/// NOT async-signal-safe (it is the waiting side); never blocks longer than `timeout_ns`.
void cstallmon_capture(int slot, uintptr_t *frames, uint32_t max_frames, int64_t timeout_ns,
                       cstallmon_capture_result *result);

/// The same, and each frame's RBP as the unwinder restored it into `frame_pointers` (as many as `frames`; for the
/// await chain of an async function, whose context is stored below its frame pointer). The handler then steps
/// frame by frame instead of using the fast trace. `has_frame_pointers` says whether they were filled.
/// NOT async-signal-safe (it is the waiting side); never blocks longer than `timeout_ns`.
void cstallmon_capture_with_frame_pointers(int slot, uintptr_t *frames, uintptr_t *frame_pointers,
                                           uint32_t max_frames, int64_t timeout_ns,
                                           cstallmon_capture_result *result);

/// The same, and the word at `word_address` of the thread's memory (0: none), read by the handler while the thread is
/// stopped, into the result's `recorded_word`, then the 8 bytes at that word + `pointed_offset` into `pointed_word`:
/// for an actor's drain job, the runtime's thread-local active task of the worker and that task's id, so that the
/// stack and the task it belongs to are of one moment. Both reads are process_vm_readv (a stale pointer reads as 0).
/// NOT async-signal-safe (it is the waiting side); never blocks longer than `timeout_ns`.
void cstallmon_capture_recording_word(int slot, uintptr_t *frames, uintptr_t *frame_pointers, uint32_t max_frames,
                                      int64_t timeout_ns, uintptr_t word_address, uintptr_t pointed_offset,
                                      cstallmon_capture_result *result);

/// Where an async job's first frame is, for captures with frame pointers: frames whose address lies in
/// [`runner_start`, `runner_end`) are the executor's job runners, and inside the outermost of them, the job's first
/// frame is the outermost one the runtime called with `resume_call` as the return address (the call into a task's
/// partial function: right under the runner's runtime frames for a task's job, deeper in an actor's drain job). On a
/// thread with no such runner (a loop whose own executor runs the job), the outermost such frame of the stack. The
/// handler then reads, from the thread's own stack, the async context below that frame's frame pointer (`job_frame`,
/// `job_context` of the result). Set once the await-chain layout check passed; until then nothing is read.
/// Async-signal-safe (atomic stores).
void cstallmon_set_async_job_frames(uintptr_t runner_start, uintptr_t runner_end, uintptr_t resume_call);

/// Frees a slot its owner released while a late handler was still owed, when the thread that handler was owed on
/// has exited (its pending signal died with it). Returns 1 when the slot is free (now or already), 0 while it
/// still waits for its handler. For slots borrowed on threads the monitor does not own (a lock's holder), which may
/// block the signal or exit at any time. NOT async-signal-safe.
int cstallmon_slot_reap(int slot);

/// 1 while `slot` is free (not assigned to any thread), 0 otherwise; for tests and diagnostics.
/// Async-signal-safe (one atomic load).
int cstallmon_slot_is_free(int slot);

/// Tests only: `hook(slot)` is called by cstallmon_capture after it has collected a finished capture and before it
/// hands the slot back, to put a release exactly there. NULL (the default) in production. NOT async-signal-safe.
void cstallmon_set_test_hook_after_capture(void (*hook)(int slot));

/// Unblocks the sampling signal on the calling thread (a mask inherited from the thread's creator must not hide it),
/// then captures the thread's own stack through the same handler, so that libunwind's caches, lazy binding and
/// per-thread state are warmed up before the first real capture. Call once on each monitored thread at start.
/// Returns a cstallmon_capture_status. NOT async-signal-safe.
int cstallmon_warm_up(int slot);

/// The pthread_self() of the slot's thread, recorded by `cstallmon_warm_up` (0 before): where its thread-local
/// variables are (a loop thread's active task, for the await chain of async code the loop runs). Async-signal-safe
/// (atomic loads).
uintptr_t cstallmon_slot_thread(int slot);

/// 1 if thread `tid` of this process blocks `signal_number` (SigBlk in /proc/self/task/TID/status), 0 if not,
/// -1 if that file could not be read. NOT async-signal-safe (stdio).
int cstallmon_thread_blocks_signal(pid_t tid, int signal_number);

/// Copies `length` bytes at `address` of this process into `buffer` with process_vm_readv on our own pid: a read
/// that cannot fault, so the watchdog can look at a lock word another thread may free at any moment. Returns 0
/// when every byte was read, -1 otherwise (unmapped, partially mapped, or the call denied). Async-signal-safe
/// (one system call).
int cstallmon_read_own_memory(uintptr_t address, void *buffer, size_t length);

// The caller's thread id is CStallmonLoopShims' `cstallmon_gettid`; the clocks are CStallmonMeasure's
// `cstallmon_monotonic_ns` and `cstallmon_realtime_ns` (re-exported here), one definition for every module.

/// One loaded ELF image (the executable, a shared library, the vDSO).
typedef struct {
    const char *path;         ///< file path ("" for the vDSO); valid only during the visitor call
    uintptr_t load_bias;      ///< dlpi_addr: address = load_bias + ELF virtual address
    uintptr_t start;          ///< lowest mapped address of its PT_LOAD segments
    uintptr_t end;            ///< one past the highest
    const uint8_t *build_id;  ///< NT_GNU_BUILD_ID bytes, or NULL
    uint32_t build_id_size;
} cstallmon_image;

typedef void (*cstallmon_image_visitor)(const cstallmon_image *image, void *context);

/// Calls `visitor` for every loaded image (dl_iterate_phdr). The executable's path is resolved through
/// /proc/self/exe. NOT async-signal-safe (takes the loader lock).
void cstallmon_for_each_image(cstallmon_image_visitor visitor, void *context);

#ifdef __cplusplus
}
#endif
#endif
