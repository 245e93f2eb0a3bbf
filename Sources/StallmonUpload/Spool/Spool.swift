import Foundation
import Stallmon
import StallmonReport

/// The upload queue on disk, inside the report directory so every move is a same-filesystem rename:
///
///     <report_dir>/spool/pending/stall-….json    hard link to a report waiting for upload
///     <report_dir>/spool/rejected/stall-….json   a report the receiver refused (never retried)
///     <report_dir>/spool/rejected/stall-….json.reason   why (status and response excerpt)
///
/// Spooling links the report (no copy) under a temporary name and renames it into `pending/`, so an entry is either
/// absent or complete; an interim report's entry is replaced by its final one (same name, same id). Deleting the
/// local report does not lose the spooled one. A delivered entry is unlinked only after a 2xx.
public struct Spool: Sendable {
    public let directory: String
    public var pendingDirectory: String { directory + "/pending" }
    public var rejectedDirectory: String { directory + "/rejected" }

    /// The spool of a report directory.
    public init(reportDirectory: String) {
        let trimmed = reportDirectory.hasSuffix("/") ? String(reportDirectory.dropLast()) : reportDirectory
        directory = trimmed + "/spool"
    }

    func prepare() throws(FileError) {
        try AtomicFile.createDirectory(pendingDirectory)
        try AtomicFile.createDirectory(rejectedDirectory)
    }

    /// The entry name of the report published at `path`: its file name.
    public static func entryName(forReportAt path: String) -> String {
        path.split(separator: "/").last.map(String.init) ?? path
    }

    /// Queues the report whose JSON is in `reportPath` (a file on the report directory's file system) for upload,
    /// as entry `name` (default: the file's own name).
    public func enqueue(reportPath: String, name: String? = nil) throws(FileError) {
        try prepare()
        let name = name ?? Self.entryName(forReportAt: reportPath)
        let temporary = "\(pendingDirectory)/.tmp-\(name)-\(UInt32.random(in: 0...UInt32.max))"
        guard link(reportPath, temporary) == 0 else { throw .last("link into spool", temporary) }
        guard rename(temporary, "\(pendingDirectory)/\(name)") == 0 else {
            let failure = FileError.last("rename into spool", name)
            _ = unlink(temporary)
            throw failure
        }
        try AtomicFile.syncDirectory(pendingDirectory)
    }

    /// The monitor spools a report before publishing it in the report directory, so a process killed between the two
    /// leaves it only here. Links such entries back into the report directory (same name, same file), so the two
    /// agree again. Returns how many were restored; never fails (a spool or directory it cannot read is left alone).
    @discardableResult
    public func restoreUnpublishedReports() -> Int {
        let reportDirectory = AtomicFile.parentDirectory(of: directory)
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: pendingDirectory) else { return 0 }
        var restored = 0
        for name in names where name.hasPrefix("stall-") && name.hasSuffix(".json") {
            let published = "\(reportDirectory)/\(name)"
            if access(published, F_OK) == 0 { continue }
            if link("\(pendingDirectory)/\(name)", published) == 0 { restored += 1 }
        }
        if restored > 0 { try? AtomicFile.syncDirectory(reportDirectory) }
        return restored
    }

    /// An advisory lock on the spool (`flock` on `spool/.lock`), held by the uploader that is sending, so that an
    /// in-process uploader and a sidecar `stallmon upload --daemon` (or two processes) never send the same entries
    /// at once. Released when the value is released.
    public final class SendingLock: Sendable {
        /// -1 for a lock that coordinates nothing (the lock file could not be opened).
        private let fd: Int32

        fileprivate init(fd: Int32) {
            self.fd = fd
        }

        deinit {
            guard fd >= 0 else { return }
            _ = flock(fd, LOCK_UN)
            close(fd)
        }
    }

    /// Takes the sending lock without waiting: nil while another uploader holds it. A spool where the lock file
    /// cannot be created or opened (read-only, say) gets a lock that coordinates nothing, rather than no uploads.
    func tryLockForSending() -> SendingLock? {
        let path = directory + "/.lock"
        // In a directory another user could steer, no lock file is opened (or created through a planted link);
        // listing the entries then fails with the reason.
        guard (try? DirectoryTrust.verify(directory)) != nil else { return SendingLock(fd: -1) }
        var fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o600)
        if fd < 0 && errno != ELOOP { fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) }
        if fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0 {
            close(fd)
            return nil  // another uploader is sending
        }
        return SendingLock(fd: fd)
    }

    /// The entries of `batch` that are still pending as the very files that were listed.
    func stillPending(_ batch: [SpoolEntry]) -> [SpoolEntry] {
        batch.filter { entry in
            var info = stat()
            guard stat(path(of: entry), &info) == 0 else { return false }
            return entry.identity.map { $0 == FileIdentity(info) } ?? true
        }
    }

    /// Pending entries, oldest first. Temporary files of an interrupted enqueue or removal, once older than a minute,
    /// are removed.
    public func pending() throws(FileError) -> [SpoolEntry] {
        // Entries are read and sent off the host: a directory another user could fill (with a link to a secret
        // file, say) is refused before anything in it is read.
        var info = stat()
        if lstat(pendingDirectory, &info) != 0 && errno == ENOENT { return [] }
        try DirectoryTrust.verify(pendingDirectory)
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: pendingDirectory)
        } catch {
            if !FileManager.default.fileExists(atPath: pendingDirectory) { return [] }
            throw FileError(path: pendingDirectory, operation: "list", errorNumber: EACCES)
        }
        var entries: [SpoolEntry] = []
        for name in names {
            let path = "\(pendingDirectory)/\(name)"
            var info = stat()
            guard lstat(path, &info) == 0 else { continue }
            if name.hasPrefix(".tmp-") {
                // Never one that a live enqueue is between link and rename on: only old leftovers go.
                if AtomicFile.isAbandonedTemporary(name, info) { _ = unlink(path) }
                continue
            }
            guard name.hasSuffix(".json"), info.st_mode & S_IFMT == S_IFREG else { continue }  // never a link
            entries.append(SpoolEntry(name: name, bytes: Int(info.st_size), spooledAt: info.modifiedNanoseconds,
                                      identity: FileIdentity(info)))
        }
        return entries.sorted { $0.name < $1.name }
    }

    func path(of entry: SpoolEntry) -> String { "\(pendingDirectory)/\(entry.name)" }

    /// Removes delivered (or dropped) entries, each only if `pending/` still holds the very file that was listed:
    /// the entry is first renamed aside (atomic), then compared; a newer file that replaced it (a final report over
    /// its interim) is put back. Entries already gone are fine.
    func remove(_ entries: [SpoolEntry]) throws(FileError) {
        for entry in entries {
            let path = path(of: entry)
            guard let identity = entry.identity else {
                if unlink(path) != 0 && errno != ENOENT { throw .last("unlink", path) }
                continue
            }
            let aside = "\(pendingDirectory)/.tmp-removing-\(entry.name)-\(UInt32.random(in: 0...UInt32.max))"
            guard rename(path, aside) == 0 else {
                if errno == ENOENT { continue }
                throw .last("unlink", path)
            }
            var info = stat()
            if stat(aside, &info) == 0 && FileIdentity(info) != identity {
                // Replaced after it was listed: the newer content was not sent. Put it back unless an even newer one
                // arrived meanwhile (EEXIST), which then supersedes it.
                if link(aside, path) != 0 && errno != EEXIST {
                    let failure = FileError.last("restore", path)
                    _ = rename(aside, path)
                    throw failure
                }
            }
            _ = unlink(aside)
        }
        if !entries.isEmpty { try AtomicFile.syncDirectory(pendingDirectory) }
    }

    /// Moves entries to `rejected/`, each with a `.reason` file written first; as `remove`, only the very file that
    /// was listed: an entry replaced since (an interim report by its final one) stays pending, to be sent.
    func reject(_ entries: [SpoolEntry], reason: String) throws(FileError) {
        try prepare()
        for entry in entries {
            let target = "\(rejectedDirectory)/\(entry.name)"
            try AtomicFile.write(Array((reason + "\n").utf8), to: target + ".reason")
            guard let identity = entry.identity else {
                guard rename(path(of: entry), target) == 0 else { throw .last("move to rejected", target) }
                continue
            }
            // Set aside first, so what is checked is what is moved.
            let aside = "\(pendingDirectory)/.tmp-rejecting-\(entry.name)-\(UInt32.random(in: 0...UInt32.max))"
            guard rename(path(of: entry), aside) == 0 else {
                if errno == ENOENT { _ = unlink(target + ".reason"); continue }
                throw .last("move to rejected", target)
            }
            var info = stat()
            if stat(aside, &info) == 0 && FileIdentity(info) != identity {
                // Replaced after it was listed: the newer content was never sent. Put it back (unless an even newer
                // one arrived meanwhile, EEXIST, which supersedes it) and leave it pending.
                if link(aside, path(of: entry)) != 0 && errno != EEXIST {
                    let failure = FileError.last("restore", path(of: entry))
                    _ = rename(aside, path(of: entry))
                    throw failure
                }
                _ = unlink(aside)
                _ = unlink(target + ".reason")
                continue
            }
            guard rename(aside, target) == 0 else {
                let failure = FileError.last("move to rejected", target)
                _ = rename(aside, path(of: entry))
                throw failure
            }
        }
        if !entries.isEmpty {
            try AtomicFile.syncDirectory(rejectedDirectory)
            try AtomicFile.syncDirectory(pendingDirectory)
        }
    }

    /// Names in `rejected/` (reports only).
    public func rejected() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: rejectedDirectory)) ?? [])
            .filter { $0.hasSuffix(".json") }.sorted()
    }
}
