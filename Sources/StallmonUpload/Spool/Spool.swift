import CStallmonLoopShims
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
///
/// An entry being removed or rejected is first renamed aside (`.aside-…`), checked, then unlinked or moved on; all of
/// that happens under the sending lock, so an aside that a holder of the lock finds was left by an uploader killed
/// midway, and is put back (`restoreOrphanedAsides`). No sweep of old temporary files ever takes an aside.
package struct Spool: Sendable {
    package let directory: String
    /// Called with an aside's path right after an entry was renamed aside, before it is checked: for tests that
    /// make another uploader act in that window.
    package var afterSettingAside: (@Sendable (String) -> Void)?
    package var pendingDirectory: String { directory + "/pending" }
    package var rejectedDirectory: String { directory + "/rejected" }

    /// The spool of a report directory.
    package init(reportDirectory: String) {
        let trimmed = reportDirectory.hasSuffix("/") ? String(reportDirectory.dropLast()) : reportDirectory
        directory = trimmed + "/spool"
    }

    func prepare() throws(FileError) {
        try AtomicFile.createDirectory(pendingDirectory)
        try AtomicFile.createDirectory(rejectedDirectory)
    }

    /// The entry name of the report published at `path`: its file name.
    package static func entryName(forReportAt path: String) -> String {
        path.split(separator: "/").last.map(String.init) ?? path
    }

    /// Queues the report whose JSON is in `reportPath` (a file on the report directory's file system) for upload,
    /// as entry `name` (default: the file's own name).
    package func enqueue(reportPath: String, name: String? = nil) throws(FileError) {
        try prepare()
        let name = name ?? Self.entryName(forReportAt: reportPath)
        // A hard link keeps the report's modification time, so the name carries the temporary's own (see
        // `AtomicFile.isAbandonedTemporary`): a report written long ago is not taken for an abandoned temporary.
        let temporary = "\(pendingDirectory)/" + AtomicFile.datedTemporaryName(for: name)
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
    package func restoreUnpublishedReports() -> Int {
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
    package final class SendingLock: Sendable {
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
    /// Every listing that leads to a send, removal or rejection happens under it; taking it puts back the asides a
    /// killed holder left.
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
        if fd >= 0 { restoreOrphanedAsides() }
        return SendingLock(fd: fd)
    }

    /// What an aside is for, the first word of its name.
    private enum AsidePurpose: String {
        case removing, rejecting
    }

    /// `.aside-<purpose>-<8 hex digits>-<entry name>`: the entry's name comes last, whole, so it is read back exactly.
    private func asidePath(for entry: SpoolEntry, _ purpose: AsidePurpose) -> String {
        let tag = String(UInt32.random(in: 0...UInt32.max), radix: 16)
        let padded = String(repeating: "0", count: 8 - tag.count) + tag
        return "\(pendingDirectory)/.aside-\(purpose.rawValue)-\(padded)-\(entry.name)"
    }

    /// The entry name an aside was set aside from, or nil for a name that is not an aside.
    static func entryName(ofAside name: String) -> String? {
        guard name.hasPrefix(".aside-") else { return nil }
        let rest = name.dropFirst(".aside-".count)
        guard let dash = rest.firstIndex(of: "-"), AsidePurpose(rawValue: String(rest[..<dash])) != nil else {
            return nil
        }
        let afterPurpose = rest[rest.index(after: dash)...]
        guard afterPurpose.count > 9, afterPurpose.dropFirst(8).first == "-" else { return nil }
        let entry = String(afterPurpose.dropFirst(9))
        return entry.hasSuffix(".json") && !entry.contains("/") ? entry : nil
    }

    /// Puts back the asides an uploader killed between setting an entry aside and finishing with it left: each
    /// becomes its entry again unless a newer one took the name meanwhile (which supersedes it). A removal that was
    /// interrupted after its acknowledgement is thus sent again (at-least-once: the receiver dedupes on the id);
    /// nothing is lost. Called only by the holder of the sending lock, so no aside in progress is taken.
    @discardableResult
    func restoreOrphanedAsides() -> Int {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: pendingDirectory) else { return 0 }
        var restored = 0
        for name in names {
            guard let entry = Self.entryName(ofAside: name) else { continue }
            let aside = "\(pendingDirectory)/\(name)"
            // Linked, never renamed back over the name: an enqueue may be putting a newer one there right now.
            if link(aside, "\(pendingDirectory)/\(entry)") == 0 {
                restored += 1
            } else if errno != EEXIST {
                continue  // left for the next holder rather than lost
            }
            _ = unlink(aside)
        }
        if restored > 0 { try? AtomicFile.syncDirectory(pendingDirectory) }
        return restored
    }

    /// Pending entries, oldest first. Temporary files of an interrupted enqueue, once older than a minute, are
    /// removed; asides are not entries and are never removed here (see `restoreOrphanedAsides`).
    package func pending() throws(FileError) -> [SpoolEntry] {
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
            if name.hasPrefix(".") { continue }  // an aside, the lock
            guard name.hasSuffix(".json"), info.st_mode & S_IFMT == S_IFREG else { continue }  // never a link
            // From lstat: opening each of 10,000 entries at every listing for its generation cost a third of the
            // upload's time; the entries sent are pinned with it (`pinned`).
            entries.append(SpoolEntry(name: name, bytes: Int(info.st_size), spooledAt: info.modifiedNanoseconds,
                                      identity: FileIdentity(info, generation: nil)))
        }
        return entries.sorted { $0.name < $1.name }
    }

    func path(of entry: SpoolEntry) -> String { "\(pendingDirectory)/\(entry.name)" }

    /// `entries` that are still the very files listed, pinned as `pinned` pins them; entries gone or replaced since
    /// the listing are left out, for the next listing to find as they are now (a batch sent from an older listing
    /// then never reads a newer file under a listed name, nor reads a removed one).
    package func pinnedIfUnchanged(_ entries: [SpoolEntry]) -> [SpoolEntry] {
        entries.compactMap(pin)
    }

    /// `entries` with their inode generations, read now (the listing takes none): what is sent is then known
    /// exactly, so that an entry replaced by a new file on the same inode number, of the same size and time, is
    /// still told apart when the 2xx comes. An entry changed since the listing keeps the listed identity.
    package func pinned(_ entries: [SpoolEntry]) -> [SpoolEntry] {
        entries.map { pin($0) ?? $0 }
    }

    /// `entry` with its file's identity read now, generation included; nil when the file is gone or no longer the
    /// one listed.
    private func pin(_ entry: SpoolEntry) -> SpoolEntry? {
        guard let identity = FileIdentity.of(path(of: entry)), FileIdentity.same(identity, entry.identity) else {
            return nil
        }
        var pinned = entry
        pinned.identity = identity
        return pinned
    }

    /// Renames `entry` aside for `purpose`, so that what is checked is what is then moved: the aside's path, and
    /// whether `pending/` held a newer file than the one listed (`identity`: a final report that replaced its interim
    /// since). Nil when the entry is gone already. `failure` names the operation in the error.
    private func setAside(_ entry: SpoolEntry, identity: FileIdentity, _ purpose: AsidePurpose,
                          failure: (operation: String, path: String))
        throws(FileError) -> (path: String, replaced: Bool)?
    {
        let aside = asidePath(for: entry, purpose)
        guard rename(path(of: entry), aside) == 0 else {
            if errno == ENOENT { return nil }
            throw .last(failure.operation, failure.path)
        }
        afterSettingAside?(aside)
        if let now = FileIdentity.of(aside) { return (aside, !FileIdentity.same(now, identity)) }
        // Gone (another uploader put it back or removed it): nothing to compare. There but not readable now
        // (EMFILE): taken as newer, so it is put back and sent again rather than removed unsent.
        var info = stat()
        return (aside, lstat(aside, &info) == 0)
    }

    /// Puts a replaced entry's `aside` back as `entry`, unless an even newer one arrived there meanwhile (`EEXIST`),
    /// which supersedes it; then removes the aside. When it cannot be linked, it is renamed back and the failure
    /// thrown.
    private func putBack(_ aside: String, as entry: String) throws(FileError) {
        guard link(aside, entry) == 0 || errno == EEXIST else {
            let failure = FileError.last("restore", entry)
            restore(aside, as: entry)
            throw failure
        }
        _ = unlink(aside)
    }

    /// Renames `aside` back to `entry` unless `entry` exists: a newer entry enqueued meanwhile supersedes the aside,
    /// which is then removed. When neither can be done, the aside stays for `restoreOrphanedAsides`.
    private func restore(_ aside: String, as entry: String) {
        if cstallmon_rename_noreplace(aside, entry) == 0 { return }
        if errno == EEXIST { _ = unlink(aside) }
    }

    /// Removes delivered (or dropped) entries, each only if `pending/` still holds the very file that was listed:
    /// the entry is first renamed aside (atomic), then compared; a newer file that replaced it (a final report over
    /// its interim) is put back. Entries already gone are fine. Only under the sending lock.
    func remove(_ entries: [SpoolEntry]) throws(FileError) {
        for entry in entries {
            let path = path(of: entry)
            guard let identity = entry.identity else {
                if unlink(path) != 0 && errno != ENOENT { throw .last("unlink", path) }
                continue
            }
            guard let aside = try setAside(entry, identity: identity, .removing, failure: ("unlink", path)) else {
                continue
            }
            if aside.replaced {
                try putBack(aside.path, as: path)  // the newer content was not sent
            } else {
                _ = unlink(aside.path)
            }
        }
        if !entries.isEmpty { try AtomicFile.syncDirectory(pendingDirectory) }
    }

    /// Moves entries to `rejected/`, each with a `.reason` file written first; as `remove`, only the very file that
    /// was listed: an entry replaced since (an interim report by its final one) stays pending, to be sent. Only under
    /// the sending lock.
    func reject(_ entries: [SpoolEntry], reason: String) throws(FileError) {
        try prepare()
        for entry in entries {
            let target = "\(rejectedDirectory)/\(entry.name)"
            try AtomicFile.write(Array((reason + "\n").utf8), to: target + ".reason")
            guard let identity = entry.identity else {
                guard rename(path(of: entry), target) == 0 else { throw .last("move to rejected", target) }
                continue
            }
            guard let aside = try setAside(entry, identity: identity, .rejecting,
                                           failure: ("move to rejected", target)) else {
                _ = unlink(target + ".reason")
                continue
            }
            if aside.replaced {
                // The newer content was never sent: it stays pending, and the refusal was not its.
                try putBack(aside.path, as: path(of: entry))
                _ = unlink(target + ".reason")
                continue
            }
            guard rename(aside.path, target) == 0 else {
                let failure = FileError.last("move to rejected", target)
                restore(aside.path, as: path(of: entry))
                throw failure
            }
        }
        if !entries.isEmpty {
            try AtomicFile.syncDirectory(rejectedDirectory)
            try AtomicFile.syncDirectory(pendingDirectory)
        }
    }

    /// Removes the oldest refused reports (and their `.reason` files) beyond `limits` at `now` (nanoseconds since the
    /// epoch); returns their names. Only under the sending lock.
    @discardableResult
    func trimRejected(limits: SpoolLimits, now: UInt64) throws(FileError) -> [String] {
        let entries = rejected().compactMap { name -> SpoolEntry? in
            var info = stat()
            guard lstat("\(rejectedDirectory)/\(name)", &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
            return SpoolEntry(name: name, bytes: Int(info.st_size), spooledAt: info.modifiedNanoseconds)
        }
        let remove = SpoolQuota.entriesToDrop(entries, limits: limits, now: now)
        for entry in remove {
            let path = "\(rejectedDirectory)/\(entry.name)"
            if unlink(path) != 0 && errno != ENOENT { throw .last("unlink", path) }
            _ = unlink(path + ".reason")
        }
        if !remove.isEmpty { try AtomicFile.syncDirectory(rejectedDirectory) }
        return remove.map(\.name)
    }

    /// Names in `rejected/` (reports only).
    package func rejected() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: rejectedDirectory)) ?? [])
            .filter { $0.hasSuffix(".json") }.sorted()
    }
}
