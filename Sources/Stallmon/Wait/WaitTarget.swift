/// What a loop thread blocked in a system call was waiting on, as one sample saw it: the call, and what the
/// descriptor it waits on is (a TCP connection with both addresses, a Unix socket, a pipe, a file).
struct WaitTarget: Hashable, Sendable {
    /// `socket`, `pipe`, `file`, `eventfd`, `lock` (a futex), `sleep`, or `syscall` for anything else.
    var kind: String
    /// The system call's name.
    var syscall: String
    /// What it waits on, when known: `TCP 127.0.0.1:39514 → 10.0.0.5:5432`, `Unix socket /run/db.sock`, a path.
    var target: String?

    /// Classifies `call`, resolving its descriptor with `resolve` (fd → kind and description).
    static func of(_ call: SystemCall, resolve: (Int32) -> (kind: String, target: String)?) -> WaitTarget {
        let name = call.name
        if let fd = call.fileDescriptor, let (kind, target) = resolve(fd) {
            return WaitTarget(kind: kind, syscall: name, target: target)
        }
        switch name {
        case "futex": return WaitTarget(kind: "lock", syscall: name, target: nil)
        case "nanosleep", "clock_nanosleep", "pause": return WaitTarget(kind: "sleep", syscall: name, target: nil)
        default: return WaitTarget(kind: "syscall", syscall: name, target: nil)
        }
    }
}
