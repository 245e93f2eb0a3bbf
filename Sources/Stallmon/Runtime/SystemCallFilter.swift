import CStallmonLoopShims
import Logging
import Synchronization

/// What a seccomp filter (systemd's `SystemCallFilter=`, a container profile) lets this process do, probed in child
/// processes the filter may kill instead of the service (`cstallmon_syscalls_probe`). systemd's `@system-service`
/// leaves out `process_vm_readv` (it is in `@debug`), and a filter's default action kills: before this probe, a
/// hardened unit died of SIGSYS as the monitor started, with no line of log.
enum SystemCallFilter {
    /// One system call stallmon makes and what is lost without it.
    struct Need {
        let call: Int32
        let without: String
    }

    static let needs: [Need] = [
        Need(call: Int32(CSTALLMON_SYSCALL_PROCESS_VM_READV),
             without: "this process's memory is read through /proc/self/mem instead"),
        Need(call: Int32(CSTALLMON_SYSCALL_TGKILL), without: "no stack sampling"),
        Need(call: Int32(CSTALLMON_SYSCALL_GETRUSAGE), without: "process freezes are not judged"),
        Need(call: Int32(CSTALLMON_SYSCALL_EPOLL_PWAIT2), without: "Looper timers to the millisecond"),
        Need(call: Int32(CSTALLMON_SYSCALL_RENAMEAT2),
             without: "a spool entry whose move failed waits for the next upload to be put back"),
        Need(call: Int32(CSTALLMON_SYSCALL_IOCTL), without: "spool files told apart without their inode generation"),
    ]

    /// Whether this process's own memory can be read without faulting (process_vm_readv, or /proc/self/mem): the
    /// runtime's task structures (await chains, task names, labels), lock words and the image table's check.
    static var allowsOwnMemoryReads: Bool {
        _ = cstallmon_syscall_verdict(Int32(CSTALLMON_SYSCALL_PROCESS_VM_READV), nil)
        return cstallmon_own_memory_readable() == 1
    }

    /// What the filter does to `call`, in words ("kills the caller with signal 31"), or nil when it is allowed.
    static func verdict(on call: Int32) -> String? {
        var detail: Int32 = 0
        switch cstallmon_syscall_verdict(call, &detail) {
        case Int32(CSTALLMON_SYSCALL_ALLOWED): return nil
        case Int32(CSTALLMON_SYSCALL_KILLED): return "kills the caller with signal \(detail)"
        case Int32(CSTALLMON_SYSCALL_REFUSED): return "refuses it with errno \(detail)"
        default: return "could not be probed (no child process could be made or it did not answer)"
        }
    }

    static func name(of call: Int32) -> String { String(cString: cstallmon_syscall_name(call)) }

    /// The filtered calls last reported, so that the warning is said once per change, not at every monitor.
    private static let reported = Mutex<[String]>([])

    /// At a monitor's start: probes (a filter installed since the last probe is seen), says once per change what the
    /// filter takes away and which unit line gives it back, and throws when the monitor cannot work safely: no
    /// `tgkill` (no sampling), or no way to read its own memory (the capture's check of unloaded libraries).
    static func checkAtStart(logger: Logger) throws(StallMonitorError) {
        cstallmon_syscalls_probe()
        let missing = needs.compactMap { need in verdict(on: need.call).map { (need: need, verdict: $0) } }
        let names = missing.map { name(of: $0.need.call) }
        let unitLine = "SystemCallFilter=\(names.joined(separator: " "))"
            + (names.contains("process_vm_readv") ? " (or SystemCallFilter=@debug)" : "")
        if let tgkill = missing.first(where: { $0.need.call == Int32(CSTALLMON_SYSCALL_TGKILL) }) {
            var detail: Int32 = 0
            if cstallmon_syscall_verdict(Int32(CSTALLMON_SYSCALL_TGKILL), &detail) == Int32(CSTALLMON_SYSCALL_UNKNOWN) {
                // Not known to be filtered, but not known to be allowed: a filter that kills would end the service.
                throw StallMonitorError(description: """
                    stallmon: cannot tell whether this process (under a seccomp filter: Seccomp \
                    \(cstallmon_seccomp_mode())) may call tgkill, which sampling needs: the probe in a child process \
                    failed (out of descriptors or processes?); try again
                    """)
            }
            throw StallMonitorError(description: """
                stallmon: a seccomp filter \(tgkill.verdict) on tgkill, which sampling needs; allow it in the \
                service's unit: \(unitLine)
                """)
        }
        if !allowsOwnMemoryReads {
            throw StallMonitorError(description: """
                stallmon: a seccomp filter forbids process_vm_readv and /proc/self/mem cannot be opened: this \
                process's memory cannot be read safely; allow it in the service's unit: \(unitLine)
                """)
        }
        let changed = reported.withLock { reported in
            defer { reported = names }
            return reported != names
        }
        guard !missing.isEmpty, changed else { return }
        let what = missing.map { "\(name(of: $0.need.call)) (the filter \($0.verdict); so \($0.need.without))" }
            .joined(separator: "; ")
        logger.warning("""
            stallmon: a seccomp filter (Seccomp: \(cstallmon_seccomp_mode()) in /proc/self/status) restricts system \
            calls stallmon makes, so it runs without them: \(what). To restore everything, add to the service's \
            unit: \(unitLine)
            """, metadata: ["filtered": "\(names.joined(separator: ","))"])
    }
}
