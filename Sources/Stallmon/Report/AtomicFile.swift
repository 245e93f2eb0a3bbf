import Foundation
#if canImport(Glibc)
import Glibc
#endif

extension stat {
    /// The modification time, nanoseconds since the Unix epoch: a time before the epoch is 0, one past what
    /// nanoseconds hold (the year 2554) the largest value. Anyone can `touch -d` a file: it never traps.
    package var modifiedNanoseconds: UInt64 {
        guard st_mtim.tv_sec >= 0 else { return 0 }
        let seconds = UInt64(st_mtim.tv_sec).multipliedReportingOverflow(by: 1_000_000_000)
        let nanoseconds = UInt64(clamping: st_mtim.tv_nsec)
        guard !seconds.overflow else { return .max }
        let total = seconds.partialValue.addingReportingOverflow(nanoseconds)
        return total.overflow ? .max : total.partialValue
    }
}

/// A file-system operation that failed, with the path and the system's reason.
package struct FileError: Error, CustomStringConvertible, Sendable {
    package let path: String
    package let operation: String
    package let errorNumber: Int32
    /// Why, when the system's reason for `errorNumber` would not say it (a directory refused as untrusted).
    package let detail: String?

    package init(path: String, operation: String, errorNumber: Int32, detail: String? = nil) {
        self.path = path
        self.operation = operation
        self.errorNumber = errorNumber
        self.detail = detail
    }

    package var description: String {
        "\(operation) \(path): \(detail ?? String(cString: strerror(errorNumber)))"
    }

    package static func last(_ operation: String, _ path: String) -> FileError {
        FileError(path: path, operation: operation, errorNumber: errno)
    }
}

/// Crash-safe file writes: readers see the old file or the new one, never a torn one.
package enum AtomicFile {
    /// Writes `bytes` to `path` via a temporary file in the same directory: write all, fsync, rename over `path`,
    /// fsync the directory. The file gets `mode` (default 0600). On failure the temporary file is removed.
    /// `beforePublishing` runs with the temporary file's path once its contents are durable and before the rename,
    /// so whatever it does with the file (e.g. link it into a spool) has happened before `path` shows it.
    package static func write(_ bytes: [UInt8], to path: String, mode: mode_t = 0o600,
                             beforePublishing: (String) -> Void = { _ in }) throws(FileError) {
        let directory = parentDirectory(of: path)
        let name = path.split(separator: "/").last.map(String.init) ?? path
        let temporary = directory + "/.tmp-\(name)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
        guard fd >= 0 else { throw .last("create", temporary) }
        var failure: FileError?
        do throws(FileError) {
            try writeAll(fd, bytes, path: temporary)
            if fsync(fd) != 0 { throw FileError.last("fsync", temporary) }
        } catch {
            failure = error
        }
        // Closed exactly once, whatever happened: after a failed close the number may already belong to someone
        // else (a socket the loop just accepted), so it is never closed again.
        if close(fd) != 0 && failure == nil { failure = .last("close", temporary) }
        if let failure {
            _ = unlink(temporary)
            throw failure
        }
        beforePublishing(temporary)
        guard rename(temporary, path) == 0 else {
            let failure = FileError.last("rename to", path)
            _ = unlink(temporary)
            throw failure
        }
        try syncDirectory(directory)
    }

    /// fsync on the directory, so a rename or unlink in it survives a crash.
    package static func syncDirectory(_ directory: String) throws(FileError) {
        let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw .last("open directory", directory) }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw .last("fsync directory", directory) }
    }

    /// write(2) until everything is written, retrying EINTR and short writes.
    package static func writeAll(_ fd: Int32, _ bytes: [UInt8], path: String) throws(FileError) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { buffer in
                Glibc.write(fd, buffer.baseAddress! + offset, buffer.count - offset)
            }
            if written < 0 {
                if errno == EINTR { continue }
                throw .last("write", path)
            }
            offset += written
        }
    }

    /// Creates `path` and missing parents with `mode` (0700), each made durable (its parent fsynced), and checks
    /// that `path` can be trusted (`DirectoryTrust.verify`): a directory that already exists is used only if it is
    /// this process's own, not a symbolic link, and writable by nobody else, under parents nobody else can change.
    /// What exists of the path is checked before anything is created, and each missing component is created alone,
    /// by a path without links, under a directory just checked: nothing is created where another user could have
    /// steered the path (a link of theirs on the way), and a component someone else created meanwhile is checked too.
    package static func createDirectory(_ path: String, mode: mode_t = 0o700) throws(FileError) {
        var created = 0
        while let missing = try DirectoryTrust.firstMissingComponent(of: path) {
            if mkdir(missing, mode) == 0 {
                // The new directory's entry must survive a crash too, or the first report's fsyncs are lost with it.
                try syncDirectory(parentDirectory(of: missing))
            } else if errno != EEXIST {
                throw .last("mkdir", missing)
            }
            created += 1
            // Bounded: a path another process keeps removing as it is created is an error, not a spin.
            guard created <= 256 else { throw FileError(path: path, operation: "create", errorNumber: EAGAIN) }
        }
    }

    /// Temporary files (`.tmp-…`: of `write`, and of the spool's enqueue and removal) younger than this may belong to
    /// an operation in progress, in this process or another (a sidecar `stallmon upload --daemon`); older ones are
    /// leftovers of a killed process. An operation takes milliseconds.
    package static let abandonedTemporaryAge: time_t = 60

    /// Whether `name`, with status `info`, is the temporary file of an operation that can no longer finish. Its age
    /// is the one its name carries (`datedTemporaryName`), else its modification time.
    package static func isAbandonedTemporary(_ name: String, _ info: stat, now: time_t = time(nil)) -> Bool {
        guard name.hasPrefix(".tmp-") else { return false }
        let (age, overflow) = now.subtractingReportingOverflow(creationTime(ofTemporary: name) ?? info.st_mtim.tv_sec)
        return !overflow && age > abandonedTemporaryAge
    }

    /// A temporary name for `name` that carries its own creation time, `.tmp-<name>-t<seconds>-<random>`: for a
    /// temporary whose modification time is not its own (a hard link keeps the linked file's).
    package static func datedTemporaryName(for name: String, now: time_t = time(nil)) -> String {
        ".tmp-\(name)-t\(now)-\(UInt32.random(in: 0...UInt32.max))"
    }

    /// The creation time a `datedTemporaryName` carries.
    package static func creationTime(ofTemporary name: String) -> time_t? {
        let parts = name.split(separator: "-")
        guard parts.count >= 3, let stamp = parts.dropLast().last, stamp.hasPrefix("t") else { return nil }
        return time_t(stamp.dropFirst())
    }

    /// Removes the abandoned temporary files in `directory` (see `isAbandonedTemporary`).
    package static func removeAbandonedTemporaryFiles(in directory: String) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return }
        for name in names where name.hasPrefix(".tmp-") {
            var info = stat()
            if stat(directory + "/" + name, &info) == 0 && isAbandonedTemporary(name, info) {
                _ = unlink(directory + "/" + name)
            }
        }
    }

    package static func parentDirectory(of path: String) -> String {
        var trimmed = Substring(path)
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed.removeLast() }
        guard let slash = trimmed.lastIndex(of: "/") else { return "." }
        if slash == trimmed.startIndex { return "/" }
        return String(trimmed[..<slash])
    }
}
