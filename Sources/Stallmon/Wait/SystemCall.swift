#if canImport(Glibc)
import Glibc
#endif

/// The system call a thread of this process is blocked in, from `/proc/self/task/TID/syscall`: its number and its
/// six arguments. Read by the watchdog thread, never by the loop thread or in the signal handler.
package struct SystemCall: Equatable, Sendable {
    var number: Int
    var arguments: [UInt64]

    /// Reads what `tid` is blocked in; nil while it runs (`running`), when it is not in a system call (`-1 …`), or
    /// when /proc is missing or denied.
    package static func current(tid: Int32) -> SystemCall? {
        guard let text = ProcFile.read("/proc/self/task/\(tid)/syscall") else { return nil }
        return parse(text)
    }

    /// Parses the file's one line: `NR ARG1 … ARG6 SP PC`, numbers in decimal then hexadecimal.
    static func parse(_ text: String) -> SystemCall? {
        let fields = text.split(whereSeparator: { $0 == " " || $0 == "\n" })
        guard fields.count >= 7, let number = Int(fields[0]), number >= 0 else { return nil }
        var arguments: [UInt64] = []
        for field in fields[1...6] {
            guard field.hasPrefix("0x"), let value = UInt64(field.dropFirst(2), radix: 16) else { return nil }
            arguments.append(value)
        }
        return SystemCall(number: number, arguments: arguments)
    }

    /// The call's name (`read`, `futex`, …), or `syscall N` for one this table does not know.
    package var name: String { Self.names[number] ?? "syscall \(number)" }

    /// The file descriptor the call waits on, for the calls whose first argument is one.
    var fileDescriptor: Int32? {
        guard Self.descriptorCalls.contains(number), let first = arguments.first, first <= UInt64(Int32.max) else {
            return nil
        }
        return Int32(first)
    }

    /// True for the calls a signal handler installed with `SA_RESTART` does not cut short: the kernel resumes them
    /// after the handler (signal(7)). Others (`nanosleep`, `poll`, `epoll_wait`, `connect`, …) fail with `EINTR`
    /// or return early, which is why a thread the monitor does not own is never signalled in one.
    /// A socket with a timeout is the exception: on one with `SO_RCVTIMEO` (receiving: `read`, `recvfrom`,
    /// `accept`, …) or `SO_SNDTIMEO` (sending: `write`, `sendto`, …) set, the call fails with `EINTR` instead.
    var restartsAfterSignal: Bool {
        guard Self.restartedNames.contains(name) else { return false }
        guard let descriptor = fileDescriptor, let direction = Self.socketDirection[name] else { return true }
        return !Self.socketHasTimeout(descriptor, option: direction == .receiving ? SO_RCVTIMEO : SO_SNDTIMEO)
    }

    private enum Direction { case receiving, sending }

    /// The calls that wait on a socket's receive or send timeout when their descriptor is a socket.
    private static let socketDirection: [String: Direction] = [
        "read": .receiving, "readv": .receiving, "recvfrom": .receiving, "recvmsg": .receiving,
        "recvmmsg": .receiving, "accept": .receiving, "accept4": .receiving,
        "write": .sending, "writev": .sending, "sendto": .sending, "sendmsg": .sending, "sendmmsg": .sending,
    ]

    /// Whether `descriptor` (of this process) is a socket with that timeout set. A descriptor that is not a socket
    /// (ENOTSOCK) has none. If the answer cannot be had, the socket is taken to have one: not signalled.
    private static func socketHasTimeout(_ descriptor: Int32, option: Int32) -> Bool {
        var timeout = timeval()
        var length = socklen_t(MemoryLayout<timeval>.size)
        if getsockopt(descriptor, SOL_SOCKET, option, &timeout, &length) != 0 {
            return errno != ENOTSOCK && errno != EBADF
        }
        return timeout.tv_sec != 0 || timeout.tv_usec != 0
    }

    static let restartedNames: Set<String> = [
        "read", "write", "readv", "writev", "pread64", "pwrite64", "openat", "wait4", "waitid", "accept", "accept4",
        "recvfrom", "sendto", "recvmsg", "sendmsg", "flock", "fcntl", "futex",
    ]

    #if arch(x86_64)
    /// x86_64 numbers (arch/x86/entry/syscalls/syscall_64.tbl) of the calls a loop thread blocks in.
    static let names: [Int: String] = [
        0: "read", 1: "write", 7: "poll", 17: "pread64", 18: "pwrite64", 19: "readv", 20: "writev", 23: "select",
        26: "msync", 34: "pause", 35: "nanosleep", 42: "connect", 43: "accept", 44: "sendto", 45: "recvfrom",
        46: "sendmsg", 47: "recvmsg", 61: "wait4", 72: "fcntl", 73: "flock", 74: "fsync", 75: "fdatasync",
        202: "futex", 230: "clock_nanosleep", 232: "epoll_wait", 247: "waitid", 257: "openat", 270: "pselect6",
        271: "ppoll", 277: "sync_file_range", 281: "epoll_pwait", 288: "accept4", 299: "recvmmsg", 307: "sendmmsg",
        426: "io_uring_enter", 441: "epoll_pwait2",
    ]
    /// Calls whose first argument is the descriptor they wait on.
    static let descriptorCalls: Set<Int> = [0, 1, 17, 18, 19, 20, 42, 43, 44, 45, 46, 47, 72, 73, 74, 75, 232, 277,
                                            281, 288, 299, 307, 441]
    #elseif arch(arm64)
    /// arm64 numbers (the generic table, include/uapi/asm-generic/unistd.h).
    static let names: [Int: String] = [
        25: "fcntl", 32: "flock", 56: "openat", 63: "read", 64: "write", 65: "readv", 66: "writev", 67: "pread64",
        68: "pwrite64", 72: "pselect6", 73: "ppoll", 74: "fsync", 83: "fdatasync", 84: "sync_file_range",
        98: "futex", 101: "nanosleep", 115: "clock_nanosleep", 202: "accept", 203: "connect", 206: "sendto",
        207: "recvfrom", 211: "sendmsg", 212: "recvmsg", 227: "msync", 242: "accept4", 243: "recvmmsg",
        260: "wait4", 269: "sendmmsg", 22: "epoll_pwait", 441: "epoll_pwait2", 426: "io_uring_enter",
    ]
    static let descriptorCalls: Set<Int> = [25, 32, 63, 64, 65, 66, 67, 68, 74, 83, 84, 202, 203, 206, 207, 211, 212,
                                            242, 243, 269, 22, 441]
    #else
    static let names: [Int: String] = [:]
    static let descriptorCalls: Set<Int> = []
    #endif
}
