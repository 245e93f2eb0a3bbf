import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The client side of `ControlSocket`, for `stallmon snapshot` and tests.
public enum ControlSocketClient {
    /// Where process `pid`'s control socket is in `directory`.
    public static func path(directory: String, pid: Int32) -> String {
        ControlSocket.path(directory: directory, pid: pid)
    }

    public enum Outcome: Sendable, Equatable {
        /// The snapshot report's path.
        case success(String)
        /// Why there is none, in words.
        case failure(String)
    }

    /// Whether a process listens at `path` (a connection is accepted, then closed without a request).
    static func isAnswering(_ path: String) -> Bool {
        guard case .success(let descriptor) = connect(to: path) else { return false }
        close(descriptor)
        return true
    }

    private enum ConnectFailure: Error {
        case tooLong
        case system(Int32)
    }

    /// A stream connection to `path` (the caller closes it), or why there is none.
    private static func connect(to path: String) -> Result<Int32, ConnectFailure> {
        guard let address = UnixSocketAddress(path) else { return .failure(.tooLong) }
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return .failure(.system(errno)) }
        guard address.withSockaddr({ Glibc.connect(descriptor, $0, $1) }) == 0 else {
            let error = errno
            close(descriptor)
            return .failure(.system(error))
        }
        return .success(descriptor)
    }

    /// Asks the service listening at `path` for a snapshot; waits up to `timeout` for the reply.
    public static func requestSnapshot(at path: String, timeout: Duration = .seconds(15)) -> Outcome {
        let descriptor: Int32
        switch connect(to: path) {
        case .success(let connected):
            descriptor = connected
        case .failure(.tooLong):
            return .failure("the socket path \(path) is too long")
        case .failure(.system(let error)):
            let reason = String(cString: strerror(error))
            switch error {
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
        let seconds = Int(timeout.components.seconds)
        var wait = timeval(tv_sec: seconds, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &wait, socklen_t(MemoryLayout<timeval>.size))
        let request = Array((ControlSocket.snapshotRequest + "\n").utf8)
        // A service that refuses (another user) answers and closes before reading: its answer is read even when
        // the request could not be sent.
        let sent = send(descriptor, request, request.count, Int32(MSG_NOSIGNAL)) == request.count
        let sendError = sent ? nil : String(cString: strerror(errno))
        var reply: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !reply.contains(UInt8(ascii: "\n")) {
            let count = recv(descriptor, &buffer, buffer.count, 0)
            if count <= 0 { break }
            reply += buffer[..<count]
        }
        let line = String(decoding: reply, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        if line.hasPrefix("ok ") { return .success(String(line.dropFirst(3))) }
        if line.hasPrefix("error ") { return .failure("the service said: " + line.dropFirst(6)) }
        if let sendError { return .failure("cannot send the request to \(path): \(sendError)") }
        return .failure("no answer from \(path) within \(timeout)")
    }
}
