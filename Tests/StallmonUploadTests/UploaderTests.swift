import Foundation
import InMemoryLogging
import Logging
@testable import Stallmon
import StallmonLoop
@testable import StallmonReport
import StallmonTestSupport
@testable import StallmonUpload
import Synchronization
import Testing

@Suite(.serialized)
struct UploaderTests {
    @Test func aHealthyReceiverGetsEveryReportExactlyOnceAsValidOTLP() throws {
        let receiver = try Receiver()
        let directory = makeTemporaryDirectory()
        let ids = try spoolSampleReports(25, into: directory)
        let uploader = try Uploader(spool: Spool(reportDirectory: directory),
                                    configuration: testUploadConfiguration(receiver.baseURL),
                                    logger: Logger(label: "test"))
        let statistics = uploader.flush(deadline: .seconds(20))
        #expect(statistics.delivered == 25)
        #expect(statistics.pending == 0)
        let requests = receiver.requests
        #expect(requests.count == 3, "batches of at most 10")
        for request in requests {
            #expect(request.parse_error == nil, "\(request.parse_error ?? "")")
            #expect(request.path == "/v1/logs")
            #expect(request.content_encoding == "gzip")
            #expect(request.content_type == "application/json")
            #expect(request.authorization == "Bearer s3cret-token")
            #expect(request.custom == "team-a")
        }
        #expect(receiver.acknowledgedIDs.sorted() == ids.sorted(), "each id once")
        let resource = try #require(requests.first?.resources?.first)
        #expect(resource["service.name"] == .object(["stringValue": .string("myservice")]))
        #expect(resource["process.pid"] == .object(["intValue": .string("4242")]))
        #expect(resource["host.name"] == .object(["stringValue": .string("host-a")]))
    }

    /// Spools `report`, uploads it as OTLP to a receiver decoding with the official opentelemetry-proto, and
    /// returns its one log record's attributes.
    private func deliverOTLPRecord(_ report: StallReport) throws -> [String: AnyJSON] {
        let receiver = try Receiver()
        let directory = makeTemporaryDirectory()
        let path = directory + "/stall-20261122T010203.456Z-\(report.id.prefix(8)).json"
        try AtomicFile.write(Array(try JSONEncoder().encode(report)), to: path)
        try Spool(reportDirectory: directory).enqueue(reportPath: path)
        let uploader = try Uploader(spool: Spool(reportDirectory: directory),
                                    configuration: testUploadConfiguration(receiver.baseURL), logger: Logger(label: "t"))
        #expect(uploader.flush(deadline: .seconds(10)).delivered == 1)
        return try #require(receiver.requests.first?.records?.first)
    }

    /// A collector can group and explain stalls as `stallmon report` does: the record carries the hottest stack (not
    /// the most common exact one), the signature, the class, the thread's CPU figures and what it waited on in most
    /// samples. Decoded with the official
    /// opentelemetry-proto.
    @Test func otlpRecordsCarrySignatureClassAndTheHottestStack() throws {
        var report = sampleReport(durationMs: 321)
        report.signature = "0123456789abcdef"
        report.stallClass = .blocked
        report.threadStats = .init(windowMs: 300, cpuMs: 12.5, runDelayMs: 0.5, sleepMs: 287, voluntarySwitches: 3,
                                   involuntarySwitches: 1)
        report.hottestStack = HottestStack(frames: [1], samples: 2, of: 2)  // differs from the common [0, 1]
        report.waitingOn = [.init(kind: "socket", syscall: "read", target: "TCP 127.0.0.1:39514 → 10.0.0.5:5432",
                                  samples: 2),
                            .init(kind: "lock", syscall: "futex", samples: 1)]
        let record = try deliverOTLPRecord(report)
        #expect(record["stallmon.stall.signature"] == .object(["stringValue": .string("0123456789abcdef")]))
        #expect(record["stallmon.stall.class"] == .object(["stringValue": .string("blocked")]))
        #expect(record["stallmon.thread.cpu_ms"] == .object(["doubleValue": .number(12.5)]))
        #expect(record["stallmon.thread.sleep_ms"] == .object(["doubleValue": .number(287)]))
        #expect(record["stallmon.stall.stack"] == .object(["stringValue": .string("main")]), "the hottest stack")
        #expect(record["stallmon.wait.kind"] == .object(["stringValue": .string("socket")]))
        #expect(record["stallmon.wait.syscall"] == .object(["stringValue": .string("read")]))
        #expect(record["stallmon.wait.target"]
                    == .object(["stringValue": .string("TCP 127.0.0.1:39514 → 10.0.0.5:5432")]))
    }

    /// A lock stall tells the collector who held the lock, what it ran (its hottest stack) and what it waited on.
    @Test func otlpRecordsNameTheLockHolderAndWhatItRan() throws {
        var report = sampleReport(durationMs: 222)
        report.waitingOn = [.init(kind: "lock", syscall: "futex", target: "pthread mutex 0x10 held by thread 7 \"w\"",
                                  holderThread: 7, holderName: "db-writer", samples: 3,
                                  holderStack: HottestStack(frames: [1], samples: 2, of: 2),
                                  holderTopFrame: .init(symbol: "App.Ledger.flush()"),
                                  holderWaiting: "fsync /var/lib/ledger.db")]
        let record = try deliverOTLPRecord(report)
        #expect(record["stallmon.wait.holder.thread"] == .object(["intValue": .string("7")]))
        #expect(record["stallmon.wait.holder.thread_name"] == .object(["stringValue": .string("db-writer")]))
        #expect(record["stallmon.wait.holder.function"] == .object(["stringValue": .string("App.Ledger.flush()")]))
        #expect(record["stallmon.wait.holder.stack"] == .object(["stringValue": .string("main")]))
        #expect(record["stallmon.wait.holder.waiting"]
                    == .object(["stringValue": .string("fsync /var/lib/ledger.db")]))
    }

    /// A stall in async code tells the collector which job held the worker.
    @Test func otlpRecordsNameTheJobOfAnAsyncStall() throws {
        var report = sampleReport(durationMs: 333)
        report.loop = "swift-global-executor"
        report.job = .init(executor: "global", priority: "high", taskId: 9_000_000_000, kind: "task",
                           taskName: "checkout cart")
        let record = try deliverOTLPRecord(report)
        #expect(record["stallmon.job.task_name"] == .object(["stringValue": .string("checkout cart")]))
        #expect(record["stallmon.job.executor"] == .object(["stringValue": .string("global")]))
        #expect(record["stallmon.job.priority"] == .object(["stringValue": .string("high")]))
        #expect(record["stallmon.job.kind"] == .object(["stringValue": .string("task")]))
        #expect(record["stallmon.job.task_id"] == .object(["stringValue": .string("9000000000")]))
        #expect(record["stallmon.loop"] == .object(["stringValue": .string("swift-global-executor")]))
    }

    /// A stall of a traced request carries the request's trace in the log record's own trace_id and span_id (hex in
    /// OTLP's JSON mapping), so the collector links it to the trace; an untraced one has neither.
    @Test func otlpRecordsCarryTheRequestsTrace() throws {
        var report = sampleReport(durationMs: 250)
        report.traceId = "4bf92f3577b34da6a3ce929d0e0e4736"
        report.spanId = "00f067aa0ba902b7"
        let record = try deliverOTLPRecord(report)
        #expect(record["@trace_id"] == .string("4bf92f3577b34da6a3ce929d0e0e4736"))
        #expect(record["@span_id"] == .string("00f067aa0ba902b7"))
        let untraced = try deliverOTLPRecord(sampleReport(durationMs: 250))
        #expect(untraced["@trace_id"] == nil)
    }

    /// A starved pool tells the collector how long, and who held the workers.
    @Test func otlpRecordsDescribeAStarvation() throws {
        var report = sampleReport(durationMs: 303)
        report.loop = "swift-global-executor"
        report.kind = "starvation"
        let culprit = StallReport.Culprit(
            thread: .init(tid: 4755, name: "worker"),
            job: .init(executor: "global", priority: "medium", taskId: 24, kind: "task", taskName: "blocker 0"),
            busyMs: 303.2, heldThroughout: true, stallClass: .blocked, topFrame: report.topFrame, hottestStack: nil,
            waitingOn: nil, signature: "c264abf44894d2a0", samples: 3)
        report.starvation = .init(verdict: "blocked", saturatedMs: 303.1, oldestWaitMs: 276.8, waitedJobs: 20,
                                  jobsRun: 25, workers: 2, culprits: [culprit])
        let record = try deliverOTLPRecord(report)
        #expect(record["stallmon.kind"] == .object(["stringValue": .string("starvation")]))
        #expect(record["stallmon.starvation.verdict"] == .object(["stringValue": .string("blocked")]))
        #expect(record["stallmon.starvation.saturated_ms"] == .object(["doubleValue": .number(303.1)]))
        #expect(record["stallmon.starvation.waited_jobs"] == .object(["intValue": .string("20")]))
        guard case .object(let value)? = record["stallmon.starvation.culprits"],
              case .string(let culprits)? = value["stringValue"] else {
            Issue.record("no culprits: \(record)")
            return
        }
        #expect(culprits.hasPrefix("thread 4755 task \"blocker 0\": "), "\(culprits)")
        #expect(culprits.hasSuffix("(blocked, busy 303.2 ms, held throughout)"), "\(culprits)")
    }

    @Test func ndjsonSendsOneReportPerLine() throws {
        let receiver = try Receiver()
        let directory = makeTemporaryDirectory()
        let ids = try spoolSampleReports(4, into: directory)
        let uploader = try Uploader(spool: Spool(reportDirectory: directory),
                                    configuration: testUploadConfiguration(receiver.baseURL + "/ingest",
                                                                           format: .ndjson),
                                    logger: Logger(label: "test"))
        #expect(uploader.flush(deadline: .seconds(10)).delivered == 4)
        #expect(receiver.requests.first?.path == "/ingest")
        #expect(receiver.requests.first?.content_type == "application/x-ndjson")
        #expect(receiver.acknowledgedIDs.sorted() == ids.sorted())
    }

    @Test func aStretchOf503sAndResetsLosesNothing() throws {
        let receiver = try Receiver(plan: #"[{"status":503},{"reset":true},{"status":503},{"reset":true}]"#)
        let directory = makeTemporaryDirectory()
        let ids = try spoolSampleReports(12, into: directory)
        let logs = InMemoryLogHandler()
        let uploader = try Uploader(spool: Spool(reportDirectory: directory),
                                    configuration: testUploadConfiguration(receiver.baseURL),
                                    logger: Logger(label: "test") { _ in logs })
        let statistics = uploader.flush(deadline: .seconds(20))
        #expect(statistics.delivered == 12)
        #expect(statistics.retryableFailures == 4)
        #expect(statistics.pending == 0)
        #expect(Set(receiver.acknowledgedIDs) == Set(ids))
        let warnings = logs.entries.filter { $0.level == .warning }
        #expect(warnings.count == 1, "logged when uploads start failing, not per try: \(warnings.map(\.message))")
        #expect(logs.entries.contains { $0.level == .notice }, "recovery is logged")
        #expect(!logs.entries.contains { "\($0.message) \($0.metadata)".contains("s3cret-token") })
    }

    /// Batches after the first are sent from the first's listing: an entry removed meanwhile must not be refused as
    /// unreadable, and one replaced meanwhile (an interim report by its final one) must go once, as it is now.
    @Test func entriesRemovedOrReplacedWhileEarlierBatchesAreSentAreNeitherRefusedNorSentTwice() throws {
        let receiver = try Receiver(plan: #"[{"sleep": 1.0}]"#)
        let directory = makeTemporaryDirectory()
        let ids = try spoolSampleReports(30, into: directory)
        let spool = Spool(reportDirectory: directory)
        let listed = try spool.pending()
        let uploader = try Uploader(spool: spool, configuration: testUploadConfiguration(receiver.baseURL),
                                    logger: Logger(label: "test"))
        let result = Mutex<UploadStatistics?>(nil)
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            let statistics = uploader.flush(deadline: .seconds(20))
            result.withLock { $0 = statistics }
            done.signal()
        }
        // The receiver holds the first batch a second: the listing the next two come from goes stale.
        for _ in 0..<500 where receiver.arrivals == 0 { usleep(10_000) }
        #expect(receiver.arrivals == 1)
        #expect(unlink(spool.path(of: listed[25])) == 0)
        let replacement = sampleReport(durationMs: 999)
        let encoded = try JSONEncoder().encode(replacement)
        let temporary = directory + "/replacement.json"
        try AtomicFile.write(Array(encoded), to: temporary)
        #expect(rename(temporary, spool.path(of: listed[15])) == 0)
        done.wait()

        let statistics = try #require(result.withLock { $0 })
        #expect(statistics.rejected == 0, "a removed entry is not refused as unreadable")
        #expect(statistics.delivered == 29 && statistics.pending == 0)
        var expected = ids
        expected.remove(at: 25)
        expected[15] = replacement.id
        #expect(receiver.acknowledgedIDs.sorted() == expected.sorted(), "each once; the replaced one as it is now")
        #expect((try? FileManager.default.contentsOfDirectory(atPath: spool.rejectedDirectory))?.isEmpty ?? true)
    }

    @Test(arguments: [400, 413, 500])
    func nonRetryableAnswersMoveTheBatchToRejectedWithoutRetrying(status: Int) throws {
        let receiver = try Receiver(plan: #"[{"status":\#(status),"body":"nope \#(status)"}]"#)
        let directory = makeTemporaryDirectory()
        try spoolSampleReports(3, into: directory)
        let spool = Spool(reportDirectory: directory)
        let uploader = try Uploader(spool: spool, configuration: testUploadConfiguration(receiver.baseURL),
                                    logger: Logger(label: "test"))
        let statistics = uploader.flush(deadline: .seconds(10))
        #expect(statistics.rejected == 3)
        #expect(statistics.pending == 0)
        #expect(receiver.requests.count == 1, "not retried")
        #expect(spool.rejected().count == 3)
        let reason = try String(contentsOfFile: spool.rejectedDirectory + "/" + spool.rejected()[0] + ".reason",
                                encoding: .utf8)
        #expect(reason.contains("HTTP \(status)") && reason.contains("nope \(status)"), "\(reason)")
    }

    /// "Bounded stop" (README): a collector that accepts the request and never answers, and one whose listener never
    /// accepts the connection (its backlog full). `stop(deadline:)` returns within the deadline plus the join's bound,
    /// and what was not acknowledged stays in the spool (issue 41, item 8: no test held this).
    @Test func stopIsBoundedWhenTheCollectorNeverAnswers() async throws {
        let receiver = try Receiver(plan: #"[{"sleep": 60}]"#)
        let directory = makeTemporaryDirectory()
        try spoolSampleReports(2, into: directory)
        var configuration = testUploadConfiguration(receiver.baseURL)
        configuration.requestTimeout = .seconds(120)
        let uploader = try Uploader(spool: Spool(reportDirectory: directory), configuration: configuration,
                                    logger: Logger(label: "test"))
        uploader.start()
        #expect(try await offThePool { eventually(timeout: .seconds(20)) { receiver.arrivals >= 1 } }, "in flight")
        let began = ContinuousClock.now
        try await offThePool { uploader.stop(deadline: .seconds(1)) }
        let took = ContinuousClock.now - began
        #expect(took < .seconds(1) + Uploader.joinAfterCancel + .seconds(3), "stop() took \(took)")
        #expect(try Spool(reportDirectory: directory).pending().count == 2, "nothing removed unacknowledged")
    }

    @Test func stopIsBoundedWhenTheCollectorNeverAccepts() async throws {
        // A listener that never accepts, its backlog filled: the next connection's handshake is never answered.
        let (listener, port) = try #require(listenOnLoopback(backlog: 0))
        defer { close(listener) }
        var fillers: [Int32] = []
        defer { fillers.forEach { close($0) } }
        for _ in 0..<4 {
            // Not waited for: a connection beyond the backlog stays in its handshake.
            fillers.append(try #require(connectToLoopback(port: port, nonBlocking: true)))
        }
        let directory = makeTemporaryDirectory()
        try spoolSampleReports(2, into: directory)
        var configuration = testUploadConfiguration("http://127.0.0.1:\(port)")
        configuration.requestTimeout = .seconds(120)
        let uploader = try Uploader(spool: Spool(reportDirectory: directory), configuration: configuration,
                                    logger: Logger(label: "test"))
        uploader.start()
        try await Task.sleep(for: .milliseconds(500))  // the connection attempt is under way (no event to wait for)
        let began = ContinuousClock.now
        try await offThePool { uploader.stop(deadline: .seconds(1)) }
        let took = ContinuousClock.now - began
        #expect(took < .seconds(1) + Uploader.joinAfterCancel + .seconds(3), "stop() took \(took)")
        #expect(try Spool(reportDirectory: directory).pending().count == 2, "nothing removed unacknowledged")
    }

    /// `rejected/` has bounds of its own (issue 41, item 4: it grew without bound, every report over the body limit and
    /// every one refused while a collector answered 400 piling up).
    @Test func rejectedStaysWithinItsBounds() throws {
        let refusals = [String](repeating: #"{"status":400,"body":"nope"}"#, count: 20).joined(separator: ",")
        let receiver = try Receiver(plan: "[\(refusals)]")
        let directory = makeTemporaryDirectory()
        let ids = try spoolSampleReports(5, into: directory)
        let spool = Spool(reportDirectory: directory)
        var configuration = testUploadConfiguration(receiver.baseURL)
        configuration.rejectedMaxReports = 2
        let logs = InMemoryLogHandler()
        let uploader = try Uploader(spool: spool, configuration: configuration, logger: Logger(label: "test") { _ in logs })
        let statistics = uploader.flush(deadline: .seconds(10))
        #expect(statistics.rejected == 5)
        let kept = spool.rejected()
        #expect(kept.count == 2, "\(kept)")
        let all = try FileManager.default.contentsOfDirectory(atPath: spool.rejectedDirectory)
        #expect(all.filter { $0.hasSuffix(".reason") }.count == 2, "the reasons go with their reports: \(all)")
        #expect(logs.entries.contains { $0.message.description.contains("rejected/ over its bounds") })
        // The newest stay.
        #expect(kept.map { String($0.dropLast(".json".count).suffix(8)) } == ids.suffix(2).map { String($0.prefix(8)) },
                "\(kept)")
    }

    /// Issue 26 (2): a refused batch whose move to rejected/ failed was sent again at once, forever: 100 % CPU, the
    /// same batch re-POSTed back to back and an error line per spin.
    @Test func aRefusedBatchThatCannotBeMovedIsNotResentAndItsMoveIsRetried() throws {
        // Refuses every request (as a receiver does that rejects this payload for good).
        let refusals = [String](repeating: #"{"status":400,"body":"nope"}"#, count: 500).joined(separator: ",")
        let receiver = try Receiver(plan: "[\(refusals)]")
        let directory = makeTemporaryDirectory()
        try spoolSampleReports(3, into: directory)
        let spool = Spool(reportDirectory: directory)
        // rejected/ replaced by a file: every move there fails.
        #expect(rmdir(spool.rejectedDirectory) == 0)
        #expect(FileManager.default.createFile(atPath: spool.rejectedDirectory, contents: Data("blocked".utf8)))
        let logs = InMemoryLogHandler()
        let uploader = try Uploader(spool: spool, configuration: testUploadConfiguration(receiver.baseURL),
                                    logger: Logger(label: "test") { _ in logs })
        let first = uploader.flush(deadline: .milliseconds(1500))
        #expect(receiver.requests.count == 1, "sent once, not again while it cannot be moved: \(receiver.requests.count)")
        #expect(first.pending == 0, "not pending any more: refused")
        let errors = logs.entries.filter { $0.level == .error }
        #expect(errors.count == 1, "one line when it starts: \(errors.map(\.message))")
        // The spool is repaired: the next try moves them, without sending them again.
        #expect(unlink(spool.rejectedDirectory) == 0)
        let second = uploader.flush(deadline: .seconds(5))
        #expect(spool.rejected().count == 3)
        #expect(second.rejected == 3)
        #expect(receiver.requests.count == 1)
        #expect(logs.entries.contains { $0.level == .notice && "\($0.message)".contains("moved to rejected/ again") })
    }

    /// Issue 26 (9): during a token rotation the collector answers 401 for a while; the spool must wait it out.
    @Test func aTokenRotationLosesNothing() throws {
        let receiver = try Receiver(plan: #"[{"status":401},{"status":403},{"status":401}]"#)
        let directory = makeTemporaryDirectory()
        let ids = try spoolSampleReports(4, into: directory)
        let spool = Spool(reportDirectory: directory)
        let logs = InMemoryLogHandler()
        let uploader = try Uploader(spool: spool, configuration: testUploadConfiguration(receiver.baseURL),
                                    logger: Logger(label: "test") { _ in logs })
        let statistics = uploader.flush(deadline: .seconds(10))
        #expect(statistics.delivered == 4)
        #expect(statistics.rejected == 0)
        #expect(spool.rejected().isEmpty)
        #expect(Set(receiver.acknowledgedIDs) == Set(ids))
        #expect(logs.entries.filter { $0.level == .warning }.count == 1, "logged once when it starts failing")
    }

    @Test func retryAfterIsRespected() throws {
        let receiver = try Receiver(plan: #"[{"status":429,"retry_after":"1"}]"#)
        let directory = makeTemporaryDirectory()
        try spoolSampleReports(2, into: directory)
        let uploader = try Uploader(spool: Spool(reportDirectory: directory),
                                    configuration: testUploadConfiguration(receiver.baseURL),
                                    logger: Logger(label: "test"))
        #expect(uploader.flush(deadline: .seconds(10)).delivered == 2)
        let requests = receiver.requests
        #expect(requests.count == 2)
        if requests.count == 2 {
            let gap = requests[1].time - requests[0].time
            #expect(gap >= 0.95, "waited \(gap) s, Retry-After said 1 s (backoff alone is 50 ms)")
        }
    }

    @Test func partialSuccessIsDeliveredAndCounted() throws {
        let receiver = try Receiver(plan: #"[{"status":200,"partial":1}]"#)
        let directory = makeTemporaryDirectory()
        try spoolSampleReports(3, into: directory)
        let uploader = try Uploader(spool: Spool(reportDirectory: directory),
                                    configuration: testUploadConfiguration(receiver.baseURL),
                                    logger: Logger(label: "test"))
        let statistics = uploader.flush(deadline: .seconds(10))
        #expect(statistics.delivered == 3)
        #expect(statistics.partiallyRejectedRecords == 1)
    }

    @Test func anUnreachableEndpointKeepsEverythingAndLogsOnce() throws {
        let directory = makeTemporaryDirectory()
        let ids = try spoolSampleReports(3, into: directory)
        let logs = InMemoryLogHandler()
        // Nothing listens on the discard port. async-http-client keeps retrying the connection until the request
        // deadline, so each try lasts the request timeout.
        var configuration = testUploadConfiguration("http://127.0.0.1:9")
        configuration.requestTimeout = .milliseconds(300)
        let uploader = try Uploader(spool: Spool(reportDirectory: directory), configuration: configuration,
                                    logger: Logger(label: "test") { _ in logs })
        let statistics = uploader.flush(deadline: .milliseconds(1500))
        #expect(statistics.delivered == 0)
        #expect(statistics.pending == ids.count)
        #expect(statistics.retryableFailures >= 2)
        #expect(logs.entries.filter { $0.level == .warning }.count == 1)
    }

    @Test func theMonitorUploadsItsReports() throws {
        let receiver = try Receiver()
        let directory = makeTemporaryDirectory()
        var configuration = StallMonitorConfiguration(detection: .init(threshold: .milliseconds(50)),
                                                      reports: .init(directory: directory))
        configuration.upload = testUploadConfiguration(receiver.baseURL)
        let loop = try Looper(name: "uploading")
        let sink = try UploadSink(configuration: configuration, logger: Logger(label: "test"))
        let monitor = try LooperStallMonitor(loop: loop, configuration: configuration, sinks: [sink])
        monitor.start()
        loop.perform { _ = stallmonTestBusySpin(milliseconds: 120) }
        loop.run(for: .milliseconds(500))
        // A first report loads the test binary's DWARF: on a loaded machine that once took over 5 s.
        _ = eventually(timeout: .seconds(30)) { !receiver.acknowledgedIDs.isEmpty }
        monitor.stop()
        let reports = readReports(directory)
        #expect(reports.count == 1)
        #expect(receiver.acknowledgedIDs == reports.map(\.id))
        #expect(sink.uploader?.statistics.pending == 0)
    }

    /// Issue 26 (8): a report whose spool link failed was published all the same and never queued, so never
    /// uploaded, while the README said every visible report had been queued.
    @Test func aReportTheSpoolRefusedIsQueuedOnceTheSpoolWorksAgain() throws {
        let directory = makeTemporaryDirectory()
        var configuration = StallMonitorConfiguration(detection: .init(threshold: .milliseconds(50)),
                                                      reports: .init(directory: directory))
        configuration.upload.spool = true
        let spool = Spool(reportDirectory: directory)
        // pending/ is a file: every link into the spool fails.
        try FileManager.default.createDirectory(atPath: directory + "/spool", withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        #expect(FileManager.default.createFile(atPath: spool.pendingDirectory, contents: Data("blocked".utf8)))
        let sink = try UploadSink(configuration: configuration, logger: Logger(label: "test"))
        let loop = try Looper(name: "unspooled")
        let logs = InMemoryLogHandler()
        let monitor = try LooperStallMonitor(loop: loop, configuration: configuration,
                                             logger: Logger(label: "test") { _ in logs }, sinks: [sink])
        monitor.start()
        postChainedSpins(loop, count: 1, milliseconds: 120, detected: { monitor.statistics.stallsDetected }, then: { loop.stop() })
        loop.run(for: .seconds(60))
        // Waited for, not timed: the writer (symbolication, fsyncs) may be far behind on a loaded machine, and the
        // test once read the directory before the final report was there (0 published, under the whole suite).
        let refused = eventually(timeout: .seconds(15)) {
            readReports(directory).count == 1 && logs.entries.contains { $0.message.description.contains("a report sink failed") }
        }
        #expect(refused, "the report is published although the spool refused it: \(logs.entries.map(\.message))")
        // Still refused: pending/ is a file, so nothing can have been queued yet.
        #expect(throws: FileError.self, "the spool works again?") { try spool.pending() }
        // The spool is repaired: the writer offers the report again within a second or so, while the monitor runs
        // (its last offer at stop would hide a retry that never came).
        #expect(unlink(spool.pendingDirectory) == 0)
        let names = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasPrefix("stall-") }
        let queued = eventually(timeout: .seconds(10)) { (try? spool.pending().map(\.name)) == names }
        monitor.stop()
        #expect(queued, "the published report queued once the spool works: \((try? spool.pending()) ?? []) vs \(names)")
    }

    @Test func aMonitorConfiguredToUploadRefusesToStartWithoutAnUploadSink() throws {
        let directory = makeTemporaryDirectory()
        var configuration = StallMonitorConfiguration(detection: .init(threshold: .milliseconds(50)),
                                                      reports: .init(directory: directory))
        configuration.upload = testUploadConfiguration("http://127.0.0.1:9")
        let loop = try Looper(name: "no-sink")
        #expect {
            _ = try LooperStallMonitor(loop: loop, configuration: configuration)
        } throws: { error in
            "\(error)".contains("UploadSink") && "\(error)".contains("upload_endpoint")
        }
        configuration.upload.endpoint = nil
        configuration.upload.spool = true
        #expect {
            _ = try LooperStallMonitor(loop: loop, configuration: configuration)
        } throws: { error in
            "\(error)".contains("spool = on")
        }
        // With the sink, the same configuration is accepted.
        _ = try LooperStallMonitor(loop: loop, configuration: configuration,
                                   sinks: [try UploadSink(configuration: configuration, logger: Logger(label: "test"))])
    }

    @Test func quotasDropTheOldestAndSayHowMany() throws {
        let receiver = try Receiver()
        let directory = makeTemporaryDirectory()
        let ids = try spoolSampleReports(8, into: directory)
        var configuration = testUploadConfiguration(receiver.baseURL)
        configuration.spoolMaxReports = 5
        let logs = InMemoryLogHandler()
        let uploader = try Uploader(spool: Spool(reportDirectory: directory), configuration: configuration,
                                    logger: Logger(label: "test") { _ in logs })
        let statistics = uploader.flush(deadline: .seconds(10))
        #expect(statistics.dropped == 3)
        #expect(statistics.delivered == 5)
        #expect(receiver.acknowledgedIDs.sorted() == Array(ids.suffix(5)).sorted(), "the newest five survive")
        #expect(logs.entries.filter { "\($0.message)".contains("over quota") }.count == 1)
    }
}
