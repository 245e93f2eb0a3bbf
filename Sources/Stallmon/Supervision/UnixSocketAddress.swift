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
}
