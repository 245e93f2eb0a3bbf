import CStallmonLoopShims
import Logging
import Synchronization

/// What a seccomp filter (systemd's `SystemCallFilter=`, a container profile) lets this process do, probed once per
/// process in child processes the filter may kill instead of the service (`cstallmon_syscalls_probe`). systemd's
/// `@system-service` leaves out `process_vm_readv` (it is in `@debug`), and a filter's default action kills: before
/// this probe, a hardened unit died of SIGSYS as the monitor started, with no line of log.
enum SystemCallFilter {
    /// One system call stallmon makes, what is lost without it, and whether the monitor can run without it.
    struct Need {
        let call: Int32
        let without: String
        let essential: Bool
    }

    static let needs: [Need] = [
        Need(call: Int32(CSTALLMON_SYSCALL_PROCESS_VM_READV),
             without: "no await chains, task names, stall labels, trace ids or lock owners", essential: false),
        Need(call: Int32(CSTALLMON_SYSCALL_TGKILL), without: "no stack sampling", essential: true),
        Need(call: Int32(CSTALLMON_SYSCALL_GETRUSAGE), without: "process freezes are not judged", essential: false),
        Need(call: Int32(CSTALLMON_SYSCALL_EPOLL_PWAIT2), without: "Looper timers to the millisecond",
             essential: false),
        Need(call: Int32(CSTALLMON_SYSCALL_RENAMEAT2),
             without: "a spool entry whose move failed waits for the next upload to be put back", essential: false),
        Need(call: Int32(CSTALLMON_SYSCALL_IOCTL), without: "spool files told apart without their inode generation",
             essential: false),
    ]

    /// Whether this process's own memory can be read without faulting (process_vm_readv).
    static var allowsOwnMemoryReads: Bool {
        cstallmon_syscalls_probe()
        return cstallmon_syscall_allowed(Int32(CSTALLMON_SYSCALL_PROCESS_VM_READV)) == 1
    }

    /// What the filter does to `call`, in words ("kills it (signal 31)"), or nil when it is allowed.
    static func verdict(on call: Int32) -> String? {
        var detail: Int32 = 0
        switch cstallmon_syscall_verdict(call, &detail) {
        case Int32(CSTALLMON_SYSCALL_ALLOWED): return nil
        case Int32(CSTALLMON_SYSCALL_KILLED): return "kills the caller with signal \(detail)"
        case Int32(CSTALLMON_SYSCALL_REFUSED): return "refuses it with errno \(detail)"
        default: return "could not be probed"
        }
    }

    static func name(of call: Int32) -> String { String(cString: cstallmon_syscall_name(call)) }

    private static let reported = Atomic<Bool>(false)

    /// At a monitor's start: probes, says once per process what the filter takes away and which unit line gives it
    /// back, and throws when the monitor cannot sample at all.
    static func checkAtStart(logger: Logger) throws(StallMonitorError) {
        cstallmon_syscalls_probe()
        let missing = needs.compactMap { need in verdict(on: need.call).map { (need, $0) } }
        guard !missing.isEmpty else { return }
        let names = missing.map { name(of: $0.0.call) }
        if let essential = missing.first(where: { $0.0.essential }) {
            throw StallMonitorError(description: """
                stallmon: a seccomp filter \(essential.1) on \(name(of: essential.0.call)), which sampling needs; \
                allow it in the unit (SystemCallFilter=\(name(of: essential.0.call)))
                """)
        }
        guard !reported.exchange(true, ordering: .relaxed) else { return }
        let what = missing.map { "\(name(of: $0.0.call)) (the filter \($0.1); so \($0.0.without))" }
            .joined(separator: "; ")
        logger.warning("""
            stallmon: a seccomp filter (Seccomp: \(cstallmon_seccomp_mode()) in /proc/self/status) restricts system \
            calls stallmon makes, so it runs without them: \(what). To restore everything, add to the service's \
            unit: SystemCallFilter=\(names.joined(separator: " "))\
            \(names.contains("process_vm_readv") ? " (or SystemCallFilter=@debug)" : "")
            """, metadata: ["filtered": "\(names.joined(separator: ","))"])
    }
}
