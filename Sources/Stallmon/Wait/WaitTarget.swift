/// What a loop thread blocked in a system call was waiting on, as one sample saw it: the call, and what the
/// descriptor it waits on is (a TCP connection with both addresses, a Unix socket, a pipe, a file).
package struct WaitTarget: Hashable, Sendable {
    /// `socket`, `pipe`, `file`, `eventfd`, `lock` (a futex), `sleep`, or `syscall` for anything else.
    package var kind: String
    /// The system call's name.
    package var syscall: String
    /// What it waits on, when known: `TCP 127.0.0.1:39514 → 10.0.0.5:5432`, `Unix socket /run/db.sock`, a path,
    /// `pthread mutex 0x… held by thread 4711 "db-writer"`.
    package var target: String?
    /// For a lock: the thread holding it, and its name (nil: it had exited by the time the sample looked).
    var holderThread: Int32? = nil
    var holderName: String? = nil

    /// One line for a reader: `fsync /var/lib/ledger.db`, `nanosleep`, `futex pthread mutex 0x… held by …`,
    /// `futex 0x… (owner unknown …)`.
    var summary: String {
        guard let target else { return syscall }
        return target.hasPrefix(syscall + " ") ? target : "\(syscall) \(target)"
    }

    /// What thread `tid` is doing, as /proc says now: its state letter (nil once it has exited) and, while it sleeps
    /// in a system call (S or D), that call (nil when /proc/self/task/TID/syscall cannot be read) and what it waits
    /// on. Watchdog thread only.
    static func current(of tid: Int32, descriptors: inout DescriptorResolver)
        -> (state: Character?, call: SystemCall?, target: WaitTarget?)
    {
        let state = ThreadStats.state(tid: tid)
        guard state == "S" || state == "D", let call = SystemCall.current(tid: tid) else { return (state, nil, nil) }
        return (state, call, WaitTarget.of(call, waiter: tid) { descriptors.resolve($0) })
    }

    /// Classifies `call` of thread `waiter`, resolving its descriptor with `resolve` (fd → kind and description)
    /// and a futex's holder with `holder`.
    package static func of(_ call: SystemCall, waiter: Int32, resolve: (Int32) -> (kind: String, target: String)?,
                           holder: (SystemCall, Int32) -> LockOwner.Holder? = { LockOwner.holder(of: $0, waiter: $1) },
                           threadName: (Int32) -> String? = existingThreadName(of:)) -> WaitTarget {
        let name = call.name
        if let fd = call.fileDescriptor, let (kind, target) = resolve(fd) {
            return WaitTarget(kind: kind, syscall: name, target: target)
        }
        switch name {
        case "futex":
            let address = "0x" + String(call.arguments.first ?? 0, radix: 16)
            guard let found = holder(call, waiter) else {
                return WaitTarget(kind: "lock", syscall: name, target: "futex \(address) (owner unknown: a condition "
                    + "variable, semaphore or other futex user)")
            }
            let holderName = threadName(found.tid)
            let who = holderName.map { "thread \(found.tid) \"\($0)\"" } ?? "thread \(found.tid), which has exited"
            return WaitTarget(kind: "lock", syscall: name, target: "\(found.kind) \(address) held by \(who)",
                              holderThread: found.tid, holderName: holderName)
        case "nanosleep", "clock_nanosleep", "pause": return WaitTarget(kind: "sleep", syscall: name, target: nil)
        default: return WaitTarget(kind: "syscall", syscall: name, target: nil)
        }
    }
}
