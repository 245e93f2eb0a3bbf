/// Why `Looper.run(in:...)` returned, as CFRunLoopRunInMode answers.
public struct LooperRunResult: Hashable, Sendable, CustomStringConvertible {
    private enum Reason: String, Hashable, Sendable {
        case finished, stopped, timedOut, handledSource, runningOnAnotherThread
    }

    private let reason: Reason

    /// The mode had no timers, descriptor sources, custom sources or posted blocks (CFRunLoop's "finished").
    public static let finished = LooperRunResult(reason: .finished)
    /// `stop()` was called.
    public static let stopped = LooperRunResult(reason: .stopped)
    /// The time given to the run passed.
    public static let timedOut = LooperRunResult(reason: .timedOut)
    /// `returnAfterSourceHandled` was set and a pass handled a source, a descriptor or a posted block.
    public static let handledSource = LooperRunResult(reason: .handledSource)
    /// The loop is running on another thread; a loop runs on one thread at a time. Nothing was run.
    public static let runningOnAnotherThread = LooperRunResult(reason: .runningOnAnotherThread)

    public var description: String { reason.rawValue }
}
