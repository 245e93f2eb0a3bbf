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

    @Test func leftoversOfAnInterruptedEnqueueAreNotEntries() throws {
        let directory = makeTemporaryDirectory()
        let spool = Spool(reportDirectory: directory)
        try spool.prepare()
        try AtomicFile.write(Array("x".utf8), to: spool.pendingDirectory + "/.tmp-stall-9.json-123")
        #expect(try spool.pending().isEmpty)
        #expect(try FileManager.default.contentsOfDirectory(atPath: spool.pendingDirectory).isEmpty)
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
}
