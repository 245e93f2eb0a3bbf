#if canImport(Glibc)
import Glibc
#endif

/// An `AF_UNIX` socket address: a path, or with a leading `@` a name in the abstract namespace (sd_notify's
/// convention), with the length `bind`, `connect` and `sendto` take: the path and its NUL, or the abstract name
/// without one.
struct UnixSocketAddress {
    private var storage = sockaddr_un()
    private let length: socklen_t

    /// Nil when `address` does not fit a `sockaddr_un`.
    init?(_ address: String) {
        var bytes = Array(address.utf8)
        let abstract = bytes.first == UInt8(ascii: "@")
        if abstract { bytes[0] = 0 }
        guard bytes.count < MemoryLayout.size(ofValue: storage.sun_path) else { return nil }
        storage.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &storage.sun_path) { raw in
            for (index, byte) in bytes.enumerated() { raw[index] = byte }
        }
        length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (abstract ? 0 : 1))
    }

    /// Calls `body` with the address as a `sockaddr` and its length.
    func withSockaddr<Result>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> Result) -> Result {
        withUnsafePointer(to: storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, length) }
        }
    }

    /// Runs `body` with an address that reaches the file-system `path`, however long: a path that does not fit
    /// `sun_path` (108 bytes) is reached through its directory, opened for the call, as `/proc/self/fd/N/name` (the
    /// socket is still bound or found at `path` itself). Nil when it cannot be (the directory cannot be opened, or the
    /// name alone does not fit).
    static func reaching<Result>(_ path: String, _ body: (UnixSocketAddress) -> Result) -> Result? {
        if !path.hasPrefix("@"), let direct = UnixSocketAddress(path) { return body(direct) }
        guard let slash = path.lastIndex(of: "/") else { return nil }
        let directory = slash == path.startIndex ? "/" : String(path[..<slash])
        let name = path[path.index(after: slash)...]
        let descriptor = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        guard let short = UnixSocketAddress("/proc/self/fd/\(descriptor)/\(name)") else { return nil }
        return body(short)
    }
}
