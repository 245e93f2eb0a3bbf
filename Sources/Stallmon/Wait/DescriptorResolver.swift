/// Names what a file descriptor of this process is, from /proc: `readlink /proc/self/fd/N`, then for sockets the
/// connection in `/proc/self/net/{tcp,tcp6,udp,udp6,unix}` found by inode. The watchdog keeps one per stall, so
/// each descriptor is resolved once per stall (the network tables are the costly part); a descriptor that is
/// closed and reused meanwhile has another link and is resolved again.
struct DescriptorResolver {
    private var cache: [String: (kind: String, target: String)] = [:]

    mutating func resolve(_ fd: Int32) -> (kind: String, target: String)? {
        guard let link = ProcFile.link("/proc/self/fd/\(fd)") else { return nil }
        if let known = cache[link] { return known }
        let resolved = Self.describe(link: link)
        cache[link] = resolved
        return resolved
    }

    /// The kind and description of a descriptor whose `/proc/self/fd` link is `link`.
    static func describe(link: String) -> (kind: String, target: String) {
        if let inode = inode(in: link, prefix: "socket:[") {
            return ("socket", socket(inode: inode) ?? "socket (inode \(inode))")
        }
        if link.hasPrefix("pipe:[") { return ("pipe", "pipe") }
        if link.hasPrefix("anon_inode:") {
            let what = link.dropFirst("anon_inode:".count).trimmingCharacters(in: ["[", "]"])
            return (what == "eventfd" ? "eventfd" : "file", String(what))
        }
        return ("file", link)
    }

    private static func inode(in link: String, prefix: String) -> UInt64? {
        guard link.hasPrefix(prefix), link.hasSuffix("]") else { return nil }
        return UInt64(link.dropFirst(prefix.count).dropLast())
    }

    /// `TCP local → peer`, `UDP local → peer`, or `Unix socket PATH`, looked up by inode.
    static func socket(inode: UInt64) -> String? {
        for (file, name) in [("tcp", "TCP"), ("tcp6", "TCP"), ("udp", "UDP"), ("udp6", "UDP")] {
            guard let table = ProcFile.read("/proc/self/net/\(file)", limit: 16 << 20) else { continue }
            if let connection = internetConnection(inode: inode, table: table) { return "\(name) \(connection)" }
        }
        if let table = ProcFile.read("/proc/self/net/unix", limit: 16 << 20) {
            for line in table.split(separator: "\n").dropFirst() {
                let fields = line.split(separator: " ", omittingEmptySubsequences: true)
                guard fields.count >= 7, UInt64(fields[6]) == inode else { continue }
                return fields.count >= 8 ? "Unix socket \(fields[7])" : "Unix socket (unnamed)"
            }
        }
        return nil
    }

    /// `local → remote` of the row of `table` (a /proc/net/tcp-style table) with `inode`.
    static func internetConnection(inode: UInt64, table: String) -> String? {
        for line in table.split(separator: "\n").dropFirst() {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count >= 10, UInt64(fields[9]) == inode,
                  let local = address(fields[1]), let remote = address(fields[2]) else { continue }
            return "\(local) → \(remote)"
        }
        return nil
    }

    /// `0100007F:9A4A` → `127.0.0.1:39498`; 32 hex digits for IPv6 → `[::1]:port`. The kernel prints each 32-bit
    /// word of the address in host byte order (little-endian here).
    static func address(_ field: Substring) -> String? {
        let parts = field.split(separator: ":")
        guard parts.count == 2, let port = UInt16(parts[1], radix: 16) else { return nil }
        let hex = parts[0]
        var bytes: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2, limitedBy: hex.endIndex) ?? hex.endIndex
            guard let byte = UInt8(hex[index..<next], radix: 16) else { return nil }
            bytes.append(byte)
            index = next
        }
        // Undo the per-word byte order.
        var ordered: [UInt8] = []
        for word in stride(from: 0, to: bytes.count, by: 4) where word + 4 <= bytes.count {
            ordered += bytes[word..<(word + 4)].reversed()
        }
        switch ordered.count {
        case 4:
            return ordered.map(String.init).joined(separator: ".") + ":\(port)"
        case 16:
            if ordered[0..<10].allSatisfy({ $0 == 0 }) && ordered[10] == 0xff && ordered[11] == 0xff {
                return ordered[12...].map(String.init).joined(separator: ".") + ":\(port)"  // IPv4-mapped
            }
            var groups: [String] = []
            for group in stride(from: 0, to: 16, by: 2) {
                groups.append(String(UInt16(ordered[group]) << 8 | UInt16(ordered[group + 1]), radix: 16))
            }
            return "[\(compressed(groups))]:\(port)"
        default:
            return nil
        }
    }

    /// RFC 5952: the longest run of two or more zero groups becomes `::`.
    private static func compressed(_ groups: [String]) -> String {
        var best = (start: -1, length: 0)
        var run = (start: -1, length: 0)
        for (index, group) in groups.enumerated() {
            if group == "0" {
                run = run.start < 0 ? (index, 1) : (run.start, run.length + 1)
                if run.length > best.length { best = run }
            } else {
                run = (-1, 0)
            }
        }
        guard best.length >= 2 else { return groups.joined(separator: ":") }
        let head = groups[..<best.start].joined(separator: ":")
        let tail = groups[(best.start + best.length)...].joined(separator: ":")
        return head + "::" + tail
    }
}
