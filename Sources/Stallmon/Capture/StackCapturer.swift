import CStallmonCapture
import CStallmonLoopShims
import StallmonReport

extension CaptureStatus {
    /// The status the C capture reported.
    init(_ raw: Int32) {
        switch raw {
        case Int32(CSTALLMON_CAPTURE_OK.rawValue): self = .ok
        case Int32(CSTALLMON_CAPTURE_TIMED_OUT.rawValue): self = .timedOut
        case Int32(CSTALLMON_CAPTURE_PENDING.rawValue): self = .pending
        case Int32(CSTALLMON_CAPTURE_SIGNAL_FAILED.rawValue): self = .signalFailed
        case Int32(CSTALLMON_CAPTURE_UNWIND_FAILED.rawValue): self = .unwindFailed
        case Int32(CSTALLMON_CAPTURE_IN_LOADER.rawValue): self = .inLoader
        default: self = .notReady
        }
    }
}

/// One stack sample: raw program counters (frame 0) and return addresses, as the handler stored them.
struct RawSample: Sendable {
    var capturedAt: UInt64
    var status: CaptureStatus
    var frames: [UInt]
    var truncated: Bool
    /// Signal sent → handler finished: how long the loop thread was interrupted (0 when it did not finish).
    var pauseNanoseconds: UInt64
    var labelID: UInt32
    /// The thread's /proc state letter read just before the signal.
    var threadState: Character? = nil
    /// The sampling signal's handler is no longer stallmon's: nothing was sent (status `signalFailed`).
    var handlerReplaced = false
    /// The stack reached code in no known image (JIT code, an object loaded since the last refresh) and ends there.
    var unknownImage = false
    /// What the thread was blocked on just before the signal (asleep in a system call), when /proc could tell.
    var wait: WaitTarget? = nil
    /// The holder of the lock it waited for, as the same moment saw it.
    var holder: HolderSample? = nil
    /// For a job of a task: the async functions that awaited the one on the stack, read right after the capture
    /// while the job still ran.
    var awaitChain: AwaitChain? = nil
    /// For a pool worker: its job was over when the capture returned, so the stack may be the next job's (or an
    /// idle worker's): no evidence of this job, as a loop's sample taken after the iteration's end.
    var afterJobEnded = false
    /// For an actor's drain job or a loop thread: the task it ran when the capture stopped it (the runtime's active
    /// task, read by the handler), 0 when none or unknown, and that task's job id, read then too.
    var activeTask: UInt = 0
    var activeTaskJobId: UInt32 = 0

    /// A sample that has no stack because of `status` (no slot, the thread could not be signalled), taken now.
    static func failed(_ status: CaptureStatus, labelID: UInt32) -> RawSample {
        RawSample(capturedAt: cstallmon_monotonic_ns(), status: status, frames: [], truncated: false,
                  pauseNanoseconds: 0, labelID: labelID)
    }
}

/// The watchdog's handle on one capture slot. Not thread-safe: one watchdog owns it.
final class StackCapturer {
    let slot: Int32
    let maxFrames: Int
    let timeoutNanoseconds: Int64
    private let buffer: UnsafeMutablePointer<UInt>
    /// Where a capture that wants them puts each frame's frame pointer (`maxFrames` of them).
    let framePointerBuffer: UnsafeMutablePointer<UInt>

    init(slot: Int32, maxFrames: Int, timeout: Duration) {
        self.slot = slot
        self.maxFrames = maxFrames
        self.timeoutNanoseconds = timeout.nanosecondsClamped
        buffer = .allocate(capacity: maxFrames)
        framePointerBuffer = .allocate(capacity: maxFrames)
    }

    deinit {
        buffer.deallocate()
        framePointerBuffer.deallocate()
    }

    func capture(labelID: UInt32) -> RawSample {
        capture(labelID: labelID, framePointers: nil).sample
    }

    /// What a capture with frame pointers found of an async job: its first frame (index and frame pointer) and the
    /// async context the handler read below it.
    struct JobFrame {
        var index: Int
        var framePointer: UInt
        var context: UInt
    }

    /// A sample, and, when `framePointers` (room for `maxFrames`, e.g. `framePointerBuffer`) is given and the
    /// handler found an async job's first frame, that frame and its context (nil otherwise). With `activeTask` (where
    /// the thread keeps its active task, and where a task keeps its job id), the sample's `activeTask` is what that
    /// word held at the capture, and `activeTaskJobId` that task's job id.
    func capture(labelID: UInt32, framePointers: UnsafeMutablePointer<UInt>?,
                 activeTask: (address: UInt, jobIdOffset: UInt)? = nil)
        -> (sample: RawSample, jobFrame: JobFrame?) {
        var result = cstallmon_capture_result()
        cstallmon_capture_recording_word(slot, buffer, framePointers, UInt32(maxFrames), timeoutNanoseconds,
                                         activeTask?.address ?? 0, activeTask?.jobIdOffset ?? 0, &result)
        let status = CaptureStatus(result.status)
        let frames = Array(UnsafeBufferPointer(start: buffer, count: Int(result.frame_count)))
        let pause = result.handler_done_ns > result.signal_sent_ns ? result.handler_done_ns - result.signal_sent_ns : 0
        let capturedAt = result.handler_entered_ns != 0 ? result.handler_entered_ns : cstallmon_monotonic_ns()
        var sample = RawSample(capturedAt: capturedAt, status: status, frames: frames,
                               truncated: result.truncated != 0, pauseNanoseconds: status == .ok ? pause : 0,
                               labelID: labelID)
        sample.handlerReplaced = result.handler_replaced != 0
        sample.unknownImage = result.unknown_image != 0
        sample.activeTask = result.recorded_word
        sample.activeTaskJobId = UInt32(truncatingIfNeeded: result.pointed_word)  // Job::Id: the low half, little-endian
        guard let framePointers, result.has_frame_pointers != 0, result.job_frame < result.frame_count else {
            return (sample, nil)
        }
        let index = Int(result.job_frame)
        return (sample, JobFrame(index: index, framePointer: framePointers[index], context: result.job_context))
    }
}
