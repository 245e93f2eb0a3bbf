import CStallmonCapture
import CStallmonLoopShims
import Foundation
import StallmonLoop

#if canImport(Glibc)
import Glibc
#endif

/// The client side of `ControlSocket`, for `stallmon snapshot` and tests.
package enum ControlSocketClient {
    /// Where process `pid`'s control socket is in `directory`.
    package static func path(directory: String, pid: Int32) -> String {
        ControlSocket.path(directory: directory, pid: pid)
    }

    package enum Outcome: Sendable, Equatable {
        /// The snapshot report's path.
        case success(String)
        /// Why there is none, in words.
        case failure(String)
    }

    /// Whether a process listens at `path`: a connection is accepted (then closed without a request), or would be
    /// but for a full backlog. Never waits: a listener that does not accept cannot hold up a monitor's start.
    static func isAnswering(_ path: String) -> Bool {
        switch connect(to: path, timeout: .zero) {
        case .success(let descriptor):
            close(descriptor)
            return true
        case .failure(.system(let error)):
            return error == EAGAIN || error == ETIMEDOUT
        case .failure(.tooLong):
            return false
        }
    }

    private enum ConnectFailure: Error {
        case tooLong
        case system(Int32)
    }

    /// A stream connection to `path` (the caller closes it), or why there is none, within `timeout`: an `AF_UNIX`
    /// connect to a listener whose backlog is full blocks until it accepts, so it is made non-blocking and tried
    /// again every 10 ms (`EAGAIN` once `timeout` passes). The descriptor is blocking again when returned.
    private static func connect(to path: String, timeout: Duration) -> Result<Int32, ConnectFailure> {
        UnixSocketAddress.reaching(path) { connect(to: $0, timeout: timeout) } ?? .failure(.tooLong)
    }

    private static func connect(to address: UnixSocketAddress, timeout: Duration) -> Result<Int32, ConnectFailure> {
        let flags = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue)
        let descriptor = socket(AF_UNIX, flags, 0)
        guard descriptor >= 0 else { return .failure(.system(errno)) }
        let deadline = MonotonicInstant.now().advanced(by: timeout).nanoseconds
        while address.withSockaddr({ Glibc.connect(descriptor, $0, $1) }) != 0 {
            var error = errno
            if error == EINTR { continue }
            if error == EAGAIN || error == EINPROGRESS {
                // A full backlog: try again until the deadline (AF_UNIX reports no completion through poll).
                let now = cstallmon_monotonic_ns()
                if now < deadline {
                    usleep(UInt32(min(10_000, (deadline - now) / 1_000)))
                    continue
                }
                error = EAGAIN
            }
            close(descriptor)
            return .failure(.system(error))
        }
        _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) & ~O_NONBLOCK)
        return .success(descriptor)
    }

    /// The longest reply read: `ok <path>` or `error <reason>`, one line.
    static let maximumReplyBytes = 8192

    /// Asks the service listening at `path` for a snapshot; waits up to `timeout` for the reply.
    package static func requestSnapshot(at path: String, timeout: Duration = .seconds(15)) -> Outcome {
        let descriptor: Int32
        let deadline = MonotonicInstant.now().advanced(by: timeout).nanoseconds
        switch connect(to: path, timeout: min(timeout, .seconds(5))) {
        case .success(let connected):
            descriptor = connected
        case .failure(.tooLong):
            return .failure("the socket path \(path) is too long")
        case .failure(.system(let error)):
            let reason = String(cString: strerror(error))
            switch error {
            case EAGAIN:
                return .failure("\(path) does not accept connections (its backlog is full): is the service hung?")
            case ENOENT, ECONNREFUSED:
                return .failure("no stallmon control socket at \(path) (\(reason)): is the process running a "
                    + "monitor with this report directory and control_socket on?")
            case EACCES, EPERM:
                return .failure("cannot connect to \(path) (\(reason)): only the service's own user may ask")
            default:
                return .failure("cannot connect to \(path): \(reason)")
            }
        }
        defer { close(descriptor) }
        // Only a service of our own user answers (it refuses any other): a socket another user put in the directory
        // is not asked, and nothing it would say is read.
        let owner = cstallmon_socket_peer_uid(descriptor)
        guard owner == Int64(geteuid()) else {
            return .failure("the socket at \(path) is served by uid \(owner), not by this user (uid \(geteuid())): "
                + "not asked; run stallmon snapshot as the service's user")
        }
        let request = Array((ControlSocket.snapshotRequest + "\n").utf8)
        // A service that refuses (another user) answers and closes before reading: its answer is read even when
        // the request could not be sent.
        var timeLeft = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_SNDTIMEO, &timeLeft, socklen_t(MemoryLayout<timeval>.size))
        let sent = send(descriptor, request, request.count, Int32(MSG_NOSIGNAL)) == request.count
        let sendError = sent ? nil : String(cString: strerror(errno))
        // One line, bounded in size and in time as a whole (a peer sending a byte now and then cannot stretch it).
        var reply: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !reply.contains(UInt8(ascii: "\n")) && reply.count < Self.maximumReplyBytes {
            let now = cstallmon_monotonic_ns()
            guard now < deadline else { break }
            let left = deadline - now
            timeLeft = timeval(tv_sec: Int(left / 1_000_000_000), tv_usec: max(1, Int(left % 1_000_000_000) / 1_000))
            setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeLeft, socklen_t(MemoryLayout<timeval>.size))
            let count = recv(descriptor, &buffer, min(buffer.count, Self.maximumReplyBytes - reply.count), 0)
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            reply += buffer[..<count]
        }
        guard let newline = reply.firstIndex(of: UInt8(ascii: "\n")) ?? (reply.count < Self.maximumReplyBytes
                                                                             ? reply.endIndex : nil) else {
            return .failure("the reply from \(path) is longer than \(Self.maximumReplyBytes) bytes: "
                + "not a stallmon service")
        }
        // The first line only: nothing after it is taken as part of a path.
        let line = String(decoding: reply[..<newline], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        if line.hasPrefix("ok ") { return .success(String(line.dropFirst(3))) }
        if line.hasPrefix("error ") { return .failure("the service said: " + line.dropFirst(6)) }
        if let sendError { return .failure("cannot send the request to \(path): \(sendError)") }
        return .failure("no answer from \(path) within \(timeout)")
    }
}
