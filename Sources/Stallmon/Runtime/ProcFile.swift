#if canImport(Glibc)
import Glibc
#endif

/// Reads of this process's /proc files, for the watchdog and the writer (never the loop thread or the handler).
enum ProcFile {
    /// The whole of a small /proc file. They report size 0, so read until end of file: into one buffer, doubled
    /// while full, up to 64 KiB. nil when it cannot be opened (gone, or /proc denied).
    static func read(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: 4096)
        var total = 0
        while true {
            if total == bytes.count {
                guard bytes.count < 64 << 10 else { break }
                bytes += [UInt8](repeating: 0, count: bytes.count)
            }
            let got = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + total, $0.count - total) }
            if got < 0 && errno == EINTR { continue }
            if got <= 0 { break }
            total += got
        }
        return String(decoding: bytes[0..<total], as: UTF8.self)
    }

    /// The target of a symbolic link such as `/proc/self/fd/N`.
    static func link(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: 4097)
        let count = readlink(path, &buffer, 4096)
        guard count > 0 else { return nil }
        return String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
