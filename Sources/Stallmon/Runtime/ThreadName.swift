import Foundation

/// The name of thread `tid` of this process (`/proc/self/task/TID/comm`), or "" when it is gone. Reports use it
/// for the loop thread; StallmonNIO names each event loop after its NIO thread with it.
package func threadName(of tid: Int32) -> String {
    guard let text = try? String(contentsOfFile: "/proc/self/task/\(tid)/comm", encoding: .utf8) else { return "" }
    return text.trimmingWhitespace()
}
