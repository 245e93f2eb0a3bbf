import Foundation
@testable import Stallmon
@testable import StallmonReport
import StallmonTestSupport
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
}
