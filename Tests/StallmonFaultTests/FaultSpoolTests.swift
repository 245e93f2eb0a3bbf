import Foundation
import InMemoryLogging
import Logging
@testable import Stallmon
@testable import StallmonReport
import StallmonTestSupport
@testable import StallmonUpload
import Testing

extension FaultTests {
    /// A spool the uploader can read but not write (a read-only mount): delivered entries cannot be removed. They
    /// must not be resent at full speed: sent once, remembered, logged once, counted, and removed once the spool is
    /// writable again.
    @Suite("Fault: a read-only spool", .serialized)
    struct FaultSpoolTests {
        @Test(.enabled(if: FaultMount.available, "a read-only mount needs root and mount (root ignores permission bits)"))
        func faultReadOnlySpoolDoesNotFloodTheCollector() throws {
            let receiver = try Receiver()
            let directory = makeTemporaryDirectory()
            let ids = try spoolSampleReports(13, into: directory)
            let spool = Spool(reportDirectory: directory)
            try #require(FaultMount.bindReadOnly(spool.directory, at: spool.directory), "read-only bind mount")
            var mounted = true
            defer { if mounted { FaultMount.unmount(spool.directory) } }
            var configuration = testUploadConfiguration(receiver.baseURL)
            configuration.batchMaxReports = 100
            let logs = InMemoryLogHandler()
            let logger = Logger(label: "test") { _ in logs }

            // --once: one request for the batch, then nothing left to send.
            let once = try Uploader(spool: spool, configuration: configuration, logger: logger)
            let statistics = once.flush(deadline: .seconds(3))
            #expect(statistics.requests == 1, "sent once, not resent: \(statistics)")
            #expect(statistics.delivered == 13 && statistics.deliveredNotRemoved == 13 && statistics.pending == 0)
            #expect(receiver.acknowledgedIDs.sorted() == ids.sorted())
            let errors = logs.entries.filter { "\($0.message)".contains("cannot be removed") }
            #expect(errors.count == 1, "logged once: \(logs.entries.map { "\($0.message)" })")

            // --daemon: what a new process finds is sent once more (at-least-once), then never again; removal is
            // retried with backoff and succeeds when the spool is writable.
            let daemon = try Uploader(spool: spool, configuration: configuration, logger: logger)
            daemon.start()
            // Its one batch, then a second of watching for a flood (an absence needs a window to be seen in).
            #expect(eventually(timeout: .seconds(10)) { receiver.requests.count >= 2 }, "the new process's batch")
            Thread.sleep(forTimeInterval: 1.0)
            let requestsWhileReadOnly = receiver.requests.count
            #expect(requestsWhileReadOnly == 2, "one more batch for the new process, no flood: \(requestsWhileReadOnly)")
            #expect(FaultMount.remount(spool.directory, readOnly: false), "remounted read-write")
            let removed = eventually(timeout: .seconds(5)) { (try? spool.pending())?.isEmpty == true }
            daemon.stop(deadline: .seconds(1))
            #expect(removed, "removed once writable")
            #expect(daemon.statistics.deliveredNotRemoved == 0)
            #expect(receiver.requests.count == requestsWhileReadOnly, "nothing resent after removal")
            #expect(logs.entries.filter { "\($0.message)".contains("removed from the spool again") }.count == 1)
            FaultMount.unmount(spool.directory)
            mounted = false
            print("Fault read-only spool: --once sent \(statistics.requests) request for 13 reports; the daemon "
                + "\(requestsWhileReadOnly - 1) in 1.5 s; removed after remount")
        }
    }
}
