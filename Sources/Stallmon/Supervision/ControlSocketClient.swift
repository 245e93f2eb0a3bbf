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
        guard let descriptor = connected(to: path) else { return false }
        close(descriptor)
        return true
    }

    private static func connected(to path: String) -> Int32? {
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return nil }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            close(descriptor)
            return nil
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in bytes.enumerated() { raw[index] = byte }
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard result == 0 else {
            close(descriptor)
            return nil
        }
        return descriptor
    }

    /// Asks the service listening at `path` for a snapshot; waits up to `timeout` for the reply.
    public static func requestSnapshot(at path: String, timeout: Duration = .seconds(15)) -> Outcome {
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return .failure("socket: \(String(cString: strerror(errno)))") }
        defer { close(descriptor) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            return .failure("the socket path \(path) is too long")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in bytes.enumerated() { raw[index] = byte }
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard connected == 0 else {
            let reason = String(cString: strerror(errno))
            switch errno {
            case ENOENT, ECONNREFUSED:
                return .failure("no stallmon control socket at \(path) (\(reason)): is the process running a "
                    + "monitor with this report directory and control_socket on?")
            case EACCES, EPERM:
                return .failure("cannot connect to \(path) (\(reason)): only the service's own user may ask")
            default:
                return .failure("cannot connect to \(path): \(reason)")
            }
        }
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
