import Foundation

/// The name of thread `tid` of this process (`/proc/self/task/TID/comm`), or "" when it is gone. Reports use it
/// for the loop thread; StallmonNIO names each event loop after its NIO thread with it.
package func threadName(of tid: Int32) -> String {
    existingThreadName(of: tid) ?? ""
}

/// The name of thread `tid` of this process, or nil when it has exited (a lock's holder, say).
func existingThreadName(of tid: Int32) -> String? {
    ProcFile.read("/proc/self/task/\(tid)/comm")?.trimmingWhitespace()
}
