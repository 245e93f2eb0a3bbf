import Foundation
@testable import Stallmon
@testable import StallmonReport
import StallmonTestSupport
import Synchronization
@testable import StallmonUpload
import Testing

struct SpoolTests {
    @Test func enqueueLinksTheReportAndAFinalReplacesItsInterim() throws {
        let directory = makeTemporaryDirectory()
        let spool = Spool(reportDirectory: directory)
        let path = directory + "/stall-1-abc.json"
        try AtomicFile.write(Array("interim".utf8), to: path)
        try spool.enqueue(reportPath: path)
        try AtomicFile.write(Array("final!!".utf8), to: path)  // the final report renames over the interim
        try spool.enqueue(reportPath: path)
        let pending = try spool.pending()
        #expect(pending.map(\.name) == ["stall-1-abc.json"])
        #expect(try String(contentsOfFile: spool.pendingDirectory + "/stall-1-abc.json", encoding: .utf8) == "final!!")
        var original = stat()
        var linked = stat()
        stat(path, &original)
        stat(spool.pendingDirectory + "/stall-1-abc.json", &linked)
        #expect(original.st_ino == linked.st_ino, "a hard link, not a copy")
        try FileManager.default.removeItem(atPath: path)
        #expect(try spool.pending().count == 1, "deleting the local report does not lose the spooled one")
    }

    @Test func aReportKilledBetweenSpoolingAndPublishingIsPutBack() throws {
        let directory = makeTemporaryDirectory()
        let spool = Spool(reportDirectory: directory)
        // What the writer leaves when killed after spooling the durable temporary file, before the rename.
        let temporary = directory + "/.tmp-stall-2-def.json-1-2"
        try AtomicFile.write(Array("report".utf8), to: temporary)
        try spool.enqueue(reportPath: temporary, name: "stall-2-def.json")
        try AtomicFile.write(Array("published".utf8), to: directory + "/stall-1-abc.json")
        try spool.enqueue(reportPath: directory + "/stall-1-abc.json")
        #expect(!FileManager.default.fileExists(atPath: directory + "/stall-2-def.json"))
        #expect(spool.restoreUnpublishedReports() == 1, "only the unpublished one")
        #expect(try String(contentsOfFile: directory + "/stall-2-def.json", encoding: .utf8) == "report")
        #expect(try String(contentsOfFile: directory + "/stall-1-abc.json", encoding: .utf8) == "published")
        #expect(spool.restoreUnpublishedReports() == 0, "idempotent")
        #expect(try spool.pending().map(\.name) == ["stall-1-abc.json", "stall-2-def.json"], "still pending")
    }

    @Test func leftoversOfAnInterruptedEnqueueAreNotEntriesAndGoOnlyWhenOld() throws {
        let directory = makeTemporaryDirectory()
        let spool = Spool(reportDirectory: directory)
        try spool.prepare()
        let fresh = spool.pendingDirectory + "/.tmp-stall-9.json-123"
        let old = spool.pendingDirectory + "/.tmp-stall-8.json-456"
        try AtomicFile.write(Array("x".utf8), to: fresh)
        try AtomicFile.write(Array("y".utf8), to: old)
        var times = [timespec(tv_sec: time(nil) - 120, tv_nsec: 0), timespec(tv_sec: time(nil) - 120, tv_nsec: 0)]
        #expect(utimensat(AT_FDCWD, old, &times, 0) == 0)
        #expect(try spool.pending().isEmpty)
        // A young one may be an enqueue in progress (this process or a sidecar's) between link and rename.
        #expect(try FileManager.default.contentsOfDirectory(atPath: spool.pendingDirectory) == [".tmp-stall-9.json-123"])
    }

    @Test func aDeliveredInterimDoesNotRemoveTheFinalThatReplacedIt() throws {
        let directory = makeTemporaryDirectory()
        let spool = Spool(reportDirectory: directory)
        let path = directory + "/stall-1-abc.json"
        try AtomicFile.write(Array("interim".utf8), to: path)
        try spool.enqueue(reportPath: path)
        let sent = try spool.pending()  // the interim's batch is in flight…
        try AtomicFile.write(Array("final!!".utf8), to: path)  // …when the final replaces it
        try spool.enqueue(reportPath: path)
        try spool.remove(sent)  // the 2xx for the interim
        let left = try spool.pending()
        #expect(left.map(\.name) == ["stall-1-abc.json"], "the final is still pending")
        #expect(try String(contentsOfFile: spool.pendingDirectory + "/stall-1-abc.json", encoding: .utf8) == "final!!")
        try spool.remove(left)
        #expect(try spool.pending().isEmpty, "the final leaves after its own 2xx")
        #expect(try FileManager.default.contentsOfDirectory(atPath: spool.pendingDirectory).isEmpty, "nothing aside")
    }

    /// The interim is sent; meanwhile the hang report replaces it, then the final one, and ext4 gives the final the
    /// interim's freed inode number. Device and inode alone took the final for the delivered interim and removed it,
    /// unsent (issue 41, item 3). Repeated until the inode was reused twice: this machine's ext4 reuses it every time
    /// when alone, but the tests around it, creating files of their own meanwhile, can take the freed inode (20 rounds
    /// once saw no reuse at all in a full run).
    @Test func aFinalOnTheDeliveredInterimsReusedInodeIsKept() throws {
        var reused = 0
        for round in 0..<100 where reused < 2 {
            let directory = makeTemporaryDirectory("spool-inode-reuse")
            let spool = Spool(reportDirectory: directory)
            let path = directory + "/stall-\(round)-abc.json"
            try AtomicFile.write(Array("interim".utf8), to: path)
            try spool.enqueue(reportPath: path)
            let sent = spool.pinned(try spool.pending())  // the interim's batch is in flight (pinned, as sent)…
            #expect(sent.allSatisfy { $0.identity?.generation != nil }, "ext4 gives the generation")
            var interim = stat()
            stat(path, &interim)
            try AtomicFile.write(Array("hang!!!".utf8), to: path)  // …the hang report replaces it…
            try spool.enqueue(reportPath: path)
            try AtomicFile.write(Array("final!!".utf8), to: path)  // …then the final one, same size as the interim
            try spool.enqueue(reportPath: path)
            var final = stat()
            stat(path, &final)
            if final.st_ino == interim.st_ino { reused += 1 }
            try spool.remove(sent)  // the 2xx for the interim
            let left = try spool.pending()
            #expect(left.map(\.name) == ["stall-\(round)-abc.json"], "the final is still pending (round \(round))")
            #expect(try String(contentsOfFile: spool.pendingDirectory + "/stall-\(round)-abc.json", encoding: .utf8)
                    == "final!!")
        }
        #expect(reused > 0, "the file system reused the interim's inode at least once: the case was exercised")
    }

    /// A move to rejected/ that fails puts the entry back, but never over a newer one enqueued meanwhile: the newer
    /// was not refused and must still be sent (issue 41, item 3: a plain rename back replaced it).
    @Test func aFailedRejectNeverReplacesANewerEntry() throws {
        let directory = makeTemporaryDirectory("spool-put-back")
        var spool = Spool(reportDirectory: directory)
        let path = directory + "/stall-1-abc.json"
        try AtomicFile.write(Array("interim".utf8), to: path)
        try spool.enqueue(reportPath: path)
        let listed = try spool.pending()
        // rejected/stall-1-abc.json is a directory with something in it: the rename of the aside there fails.
        try FileManager.default.createDirectory(atPath: spool.rejectedDirectory + "/stall-1-abc.json/x",
                                                withIntermediateDirectories: true)
        let enqueueNewer: @Sendable (String) -> Void = { _ in
            try? AtomicFile.write(Array("final".utf8), to: path)
            try? Spool(reportDirectory: directory).enqueue(reportPath: path)
        }
        spool.afterSettingAside = enqueueNewer
        #expect(throws: FileError.self) { try spool.reject(listed, reason: "HTTP 400") }
        #expect(try String(contentsOfFile: spool.pendingDirectory + "/stall-1-abc.json", encoding: .utf8) == "final")
        let names = try FileManager.default.contentsOfDirectory(atPath: spool.pendingDirectory)
        #expect(!names.contains { $0.hasPrefix(".aside-") }, "the superseded aside is gone: \(names)")
    }

    @Test func rejectKeepsTheReportAndItsReason() throws {
        let directory = makeTemporaryDirectory()
        try spoolSampleReports(2, into: directory)
        let spool = Spool(reportDirectory: directory)
        let entries = try spool.pending()
        try spool.reject([entries[0]], reason: "HTTP 400: bad")
        #expect(try spool.pending().map(\.name) == [entries[1].name])
        #expect(spool.rejected() == [entries[0].name])
        #expect(FileManager.default.fileExists(atPath: spool.rejectedDirectory + "/" + entries[0].name + ".reason"))
    }

    /// Issue 26 (9): `reject` had no identity check (unlike `remove`): a refused interim moved the final that had
    /// replaced it to rejected/, unsent.
    @Test func aRejectedInterimDoesNotTakeTheFinalThatReplacedIt() throws {
        let directory = makeTemporaryDirectory()
        let spool = Spool(reportDirectory: directory)
        let path = directory + "/stall-2-def.json"
        try AtomicFile.write(Array("interim".utf8), to: path)
        try spool.enqueue(reportPath: path)
        let sent = try spool.pending()  // the interim's batch is in flight…
        try AtomicFile.write(Array("final!!".utf8), to: path)  // …when the final replaces it
        try spool.enqueue(reportPath: path)
        try spool.reject(sent, reason: "HTTP 400: the interim was refused")
        #expect(try spool.pending().map(\.name) == ["stall-2-def.json"], "the final is still pending")
        #expect(try String(contentsOfFile: spool.pendingDirectory + "/stall-2-def.json", encoding: .utf8) == "final!!")
        #expect(spool.rejected().isEmpty, "the refusal was the interim's, not the final's")
        #expect(try FileManager.default.contentsOfDirectory(atPath: spool.pendingDirectory) == ["stall-2-def.json"],
                "nothing left aside")
    }

    // MARK: - Issue 32 (3): an entry set aside is never taken for an abandoned temporary

    /// Sets `path`'s modification time `seconds` back (a report spooled while the collector was down).
    static func age(_ path: String, seconds: Int) {
        var times = [timespec(tv_sec: time(nil) - seconds, tv_nsec: 0), timespec(tv_sec: time(nil) - seconds, tv_nsec: 0)]
        #expect(utimensat(AT_FDCWD, path, &times, 0) == 0)
    }

    /// A spool whose `remove`/`reject` lets a second uploader (another `Spool` on the same directory, a sidecar)
    /// list the spool right after each entry is set aside; returns what those listings saw.
    static func spoolWithAListingInTheAsideWindow(_ directory: String) -> (Spool, Listings) {
        let listings = Listings()
        var spool = Spool(reportDirectory: directory)
        spool.afterSettingAside = { _ in
            let seen = ((try? Spool(reportDirectory: directory).pending()) ?? []).map(\.name)
            listings.seen.withLock { $0.append(seen) }
        }
        return (spool, listings)
    }

    final class Listings: Sendable {
        let seen = Mutex<[[String]]>([])
    }

    @Test func aRefusedEntrySetAsideSurvivesAnotherUploadersListing() throws {
        let directory = makeTemporaryDirectory()
        let path = directory + "/stall-3-old.json"
        try AtomicFile.write(Array("refused".utf8), to: path)
        let (spool, listings) = Self.spoolWithAListingInTheAsideWindow(directory)
        try spool.enqueue(reportPath: path)
        Self.age(path, seconds: 600)  // written ten minutes ago: the aside keeps this time
        let sent = try spool.pending()
        try spool.reject(sent, reason: "HTTP 400: bad")
        #expect(listings.seen.withLock { $0 } == [[]], "the second listing ran in the window and saw no entry")
        #expect(spool.rejected() == ["stall-3-old.json"], "the refused report is in rejected/, not lost")
        #expect(try String(contentsOfFile: spool.rejectedDirectory + "/stall-3-old.json", encoding: .utf8) == "refused")
        #expect(try spool.pending().isEmpty)
    }

    @Test func aFinalSetAsideWithItsInterimSurvivesAnotherUploadersListing() throws {
        let directory = makeTemporaryDirectory()
        let path = directory + "/stall-4-old.json"
        try AtomicFile.write(Array("interim".utf8), to: path)
        let (spool, listings) = Self.spoolWithAListingInTheAsideWindow(directory)
        try spool.enqueue(reportPath: path)
        let sent = try spool.pending()  // the interim's batch is in flight…
        try AtomicFile.write(Array("final!!".utf8), to: path)  // …when the final replaces it
        try spool.enqueue(reportPath: path)
        Self.age(path, seconds: 600)
        try spool.remove(sent)  // the 2xx for the interim sets the final aside, sees it is newer, puts it back
        #expect(listings.seen.withLock { $0.count } == 1)
        #expect(try spool.pending().map(\.name) == ["stall-4-old.json"], "the final is still pending")
        #expect(try String(contentsOfFile: spool.pendingDirectory + "/stall-4-old.json", encoding: .utf8) == "final!!")
        #expect(try FileManager.default.contentsOfDirectory(atPath: spool.pendingDirectory) == ["stall-4-old.json"])
    }

    /// An uploader killed (SIGKILL) between setting entries aside and finishing with them: the next holder of the
    /// sending lock puts them back; a newer entry under the same name wins; an old aside is never swept.
    @Test func asidesLeftByAKilledUploaderArePutBackByTheNextLockHolder() throws {
        let directory = makeTemporaryDirectory()
        try spoolSampleReports(3, into: directory)
        let spool = Spool(reportDirectory: directory)
        let entries = try spool.pending()
        let pending = spool.pendingDirectory
        #expect(rename(pending + "/" + entries[0].name, pending + "/.aside-removing-0000abcd-" + entries[0].name) == 0)
        #expect(rename(pending + "/" + entries[1].name, pending + "/.aside-rejecting-12345678-" + entries[1].name) == 0)
        // The third was set aside too, and a newer file arrived under its name since.
        #expect(link(pending + "/" + entries[2].name, pending + "/.aside-removing-ffffffff-" + entries[2].name) == 0)
        for name in try FileManager.default.contentsOfDirectory(atPath: pending) { Self.age(pending + "/" + name, seconds: 600) }
        #expect(try spool.pending().map(\.name) == [entries[2].name], "asides are not entries")
        #expect(try FileManager.default.contentsOfDirectory(atPath: pending).count == 4, "and no listing sweeps one")
        let lock = spool.tryLockForSending()
        #expect(lock != nil)
        #expect(try spool.pending().map(\.name) == entries.map(\.name), "every entry is back")
        #expect(try FileManager.default.contentsOfDirectory(atPath: pending).sorted() == entries.map(\.name).sorted(),
                "no aside is left")
        withExtendedLifetime(lock) {}
    }

    @Test func anAsideNameGivesBackItsEntryExactly() {
        #expect(Spool.entryName(ofAside: ".aside-removing-0000abcd-stall-1-a-b.json") == "stall-1-a-b.json")
        #expect(Spool.entryName(ofAside: ".aside-rejecting-12345678-stall-2.json") == "stall-2.json")
        #expect(Spool.entryName(ofAside: ".aside-other-12345678-stall-2.json") == nil)
        #expect(Spool.entryName(ofAside: ".aside-removing-1234-stall-2.json") == nil)
        #expect(Spool.entryName(ofAside: ".tmp-stall-2.json-1-2") == nil)
        #expect(Spool.entryName(ofAside: ".aside-removing-12345678-.lock") == nil)
    }

    /// A spool link keeps the report's modification time: its age is the one its name carries.
    @Test func aTemporaryIsAsOldAsItsNameSays() {
        var old = stat()
        old.st_mtim.tv_sec = time(nil) - 600
        let now = time(nil)
        #expect(!AtomicFile.isAbandonedTemporary(AtomicFile.datedTemporaryName(for: "stall-1.json", now: now), old))
        #expect(AtomicFile.isAbandonedTemporary(AtomicFile.datedTemporaryName(for: "stall-1.json", now: now - 120), old))
        #expect(AtomicFile.isAbandonedTemporary(".tmp-stall-1.json-123-456", old), "an undated one: its mtime")
        var fresh = stat()
        fresh.st_mtim.tv_sec = now
        #expect(!AtomicFile.isAbandonedTemporary(".tmp-stall-1.json-123-456", fresh))
        #expect(!AtomicFile.isAbandonedTemporary(".aside-removing-12345678-stall-1.json", old), "never an aside")
    }
}
