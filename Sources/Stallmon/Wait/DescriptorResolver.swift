#if canImport(Glibc)
import Glibc
#endif

/// Names what a file descriptor of this process is: `readlink /proc/self/fd/N` for its kind (socket, pipe, file),
/// then, for a socket, its two ends from `getsockname` / `getpeername` on the descriptor itself, which the watchdog
/// may call on any descriptor of its own process (no /proc/net: reading `/proc/net/tcp` walks the kernel's whole
/// connection table, 5 ms here). The watchdog keeps one per stall, so each descriptor is resolved once per stall; a
/// descriptor closed and reused meanwhile has another link and is resolved again.
package struct DescriptorResolver {
    package init() {}

    private var cache: [String: (kind: String, target: String)] = [:]

    package mutating func resolve(_ fd: Int32) -> (kind: String, target: String)? {
        guard let link = ProcFile.link("/proc/self/fd/\(fd)") else { return nil }
        if let known = cache[link] { return known }
        var resolved = Self.describe(link: link)
        if resolved.kind == "socket", let ends = Self.socketEnds(fd),
           ProcFile.link("/proc/self/fd/\(fd)") == link  // still the same socket: not closed and reused meanwhile
        {
            resolved.target = ends
        }
        cache[link] = resolved
        return resolved
    }

    /// The kind and description of a descriptor whose `/proc/self/fd` link is `link`.
    static func describe(link: String) -> (kind: String, target: String) {
        if link.hasPrefix("socket:[") { return ("socket", "socket \(link.dropFirst("socket:".count))") }
        if link.hasPrefix("pipe:[") { return ("pipe", "pipe") }
        if link.hasPrefix("anon_inode:") {
            var what = Substring(link.dropFirst("anon_inode:".count))
            if what.hasPrefix("[") && what.hasSuffix("]") { what = what.dropFirst().dropLast() }
            return (what == "eventfd" ? "eventfd" : "file", String(what))
        }
        return ("file", link)
    }

    /// `TCP local → peer`, `UDP local → peer` (or `UDP local` unconnected), `Unix socket PATH`.
    static func socketEnds(_ fd: Int32) -> String? {
        var type: Int32 = 0
        var size = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &size) == 0 else { return nil }
        let local = address(of: fd, peer: false)
        let peer = address(of: fd, peer: true)
        guard let local else { return nil }
        if local.family == sa_family_t(AF_UNIX) {
            let path = [local.text, peer?.text ?? ""].first { !$0.isEmpty }
            return "Unix socket " + (path ?? "(unnamed)")
        }
        let transport = type == Int32(SOCK_STREAM.rawValue) ? "TCP" : type == Int32(SOCK_DGRAM.rawValue) ? "UDP" : "IP"
        return "\(transport) \(local.text)" + (peer.map { " → \($0.text)" } ?? "")
    }

    /// One end of a socket as text: `127.0.0.1:39514`, `[::1]:80`, a Unix path (`@name` for an abstract one).
    static func address(of fd: Int32, peer: Bool) -> (family: sa_family_t, text: String)? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let result = withUnsafeMutablePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                peer ? getpeername(fd, $0, &length) : getsockname(fd, $0, &length)
            }
        }
        guard result == 0 else { return nil }
        return withUnsafePointer(to: &storage) { pointer in
            format(UnsafeRawPointer(pointer), length: Int(length))
        }
    }

    /// Formats a socket address (`sockaddr_in`, `sockaddr_in6`, `sockaddr_un`) of `length` bytes.
    static func format(_ raw: UnsafeRawPointer, length: Int) -> (family: sa_family_t, text: String)? {
        let family = raw.load(as: sa_family_t.self)
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        switch Int32(family) {
        case AF_INET:
            var address = raw.load(as: sockaddr_in.self)
            guard inet_ntop(AF_INET, &address.sin_addr, &buffer, socklen_t(buffer.count)) != nil else { return nil }
            return (family, text(buffer) + ":\(UInt16(bigEndian: address.sin_port))")
        case AF_INET6:
            var address = raw.load(as: sockaddr_in6.self)
            guard inet_ntop(AF_INET6, &address.sin6_addr, &buffer, socklen_t(buffer.count)) != nil else { return nil }
            let host = text(buffer)
            if host.hasPrefix("::ffff:") && host.contains(".") {  // IPv4-mapped
                return (family, String(host.dropFirst("::ffff:".count)) + ":\(UInt16(bigEndian: address.sin6_port))")
            }
            return (family, "[\(host)]:\(UInt16(bigEndian: address.sin6_port))")
        case AF_UNIX:
            let pathOffset = MemoryLayout<sa_family_t>.size
            let count = max(0, length - pathOffset)
            let bytes = (0..<count).map { raw.load(fromByteOffset: pathOffset + $0, as: UInt8.self) }
            guard let first = bytes.first else { return (family, "") }
            if first == 0 {  // abstract namespace
                return (family, "@" + String(decoding: bytes.dropFirst().prefix { $0 != 0 }, as: UTF8.self))
            }
            return (family, String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self))
        default:
            return nil
        }
    }

    private static func text(_ buffer: [CChar]) -> String {
        String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
