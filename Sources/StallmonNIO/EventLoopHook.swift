#if NIO
import CStallmonLoopShims
import CStallmonNIOHook
import NIOCore
import Stallmon
import StallmonLoop
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// One event loop under watch: the loop's `LoopThreadMonitor` (probe, watchdog, capture binding) and the selector-wait hook
/// installed on its thread, which stores each tick's busy interval into the probe.
final class EventLoopHook: Sendable {
    let loop: any EventLoop
    let watch: LoopThreadMonitor
    /// The hook installed on the loop thread; this object holds the creator's reference until `close()`.
    nonisolated(unsafe) private let hook: OpaquePointer
    /// Set by `close()`; an install that comes later (a set-up task a slow loop ran after its monitor gave up) does
    /// nothing. Taken once by install and once by close, never per tick.
    private let closed = Mutex<Bool>(false)

    init(loop: any EventLoop, watch: LoopThreadMonitor) throws(StallMonitorError) {
        let probe = Unmanaged.passRetained(watch.loopProbe).toOpaque()
        guard let hook = cstallmon_wait_hook_create(
            { context, now in Unmanaged<LoopProbe>.fromOpaque(context!).takeUnretainedValue().loopIdles(at: now) },
            { context, now in Unmanaged<LoopProbe>.fromOpaque(context!).takeUnretainedValue().loopWoke(at: now) },
            probe,
            { context in Unmanaged<LoopProbe>.fromOpaque(context!).release() })
        else {
            Unmanaged<LoopProbe>.fromOpaque(probe).release()
            throw StallMonitorError(description: "out of memory creating the selector hook of \(watch.name)")
        }
        self.loop = loop
        self.watch = watch
        self.hook = hook
    }

    /// On the loop thread: installs the hook and binds the capture to this thread. Returns an errno value or 0.
    func installOnLoopThread() -> Int32 {
        closed.withLock { closed in
            // After close() the creator's reference is gone and the hook may be freed: never touch it.
            guard !closed else { return ECANCELED }
            let selector = Self.selectorDescriptor(of: loop)
            cstallmon_wait_hook_set_selector(hook, selector ?? -1)
            selectorFound.store(selector != nil, ordering: .relaxed)
            let result = cstallmon_wait_hook_install(hook)
            if result == 0 {
                watch.bindCurrentThread()
                // Installed inside a tick (this set-up task's), whose wake-up the hook never saw: open it now, so
                // that what runs in it after the set-up (a task submitted before the loop got back to its selector,
                // common on a loaded machine) is measured, not lost with it.
                watch.loopProbe.loopWoke(at: cstallmon_monotonic_ns())
            }
            return result
        }
    }

    /// Whether only the loop's own selector waits end its ticks (its epoll descriptor was found); when false, every
    /// epoll_wait on the loop thread does, and a handler's own blocking epoll_wait is taken for idle time.
    var timesOnlyTheSelector: Bool { selectorFound.load(ordering: .relaxed) }
    private let selectorFound = Atomic<Bool>(false)

    /// The epoll descriptor of a NIOPosix `SelectableEventLoop`'s selector, on the loop's thread. NIOPosix keeps it
    /// in internal stored properties (`_selector.selectorFD`), so it is read by reflection, and used only when it
    /// names an epoll instance of this process; nil for another kind of loop or a layout NIO changed.
    static func selectorDescriptor(of loop: any EventLoop) -> Int32? {
        guard let descriptor = Mirror(reflecting: loop).descendant("_selector", "selectorFD") as? Int32,
              descriptor >= 0
        else { return nil }
        var target = [CChar](repeating: 0, count: 64)
        let length = readlink("/proc/self/fd/\(descriptor)", &target, target.count - 1)
        guard length > 0 else { return nil }
        let name = String(decoding: target.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return name == "anon_inode:[eventpoll]" ? descriptor : nil
    }

    /// Selector waits that began through the hook since it was installed.
    var waitsSeen: UInt64 { cstallmon_wait_hook_waits(hook) }

    /// Stops the hook's stores and gives up this side's reference; the loop thread drops its own when it exits or
    /// another monitor installs a hook. Nothing is posted to the loop, which may be shut down already.
    func close() {
        closed.withLock { closed in
            guard !closed else { return }
            closed = true
            cstallmon_wait_hook_close(hook)
        }
    }
}
#endif
