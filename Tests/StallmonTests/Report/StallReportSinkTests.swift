import Foundation
import InMemoryLogging
import Logging
@testable import Stallmon
import StallmonLoop
@testable import StallmonReport
import StallmonTestSupport
import Synchronization
import Testing

/// A sink that records what it saw at the moment it was called.
final class RecordingSink: StallReportSink {
    struct Seen: Sendable {
        var id: String
        var path: String
        var contentsPath: String
        var publishedAlready: Bool
        var contents: Data?
    }

    let seen = Mutex<[Seen]>([])
    let started = Atomic<Int>(0)
    let stopped = Atomic<Int>(0)
    let failWith: String?

    init(failWith: String? = nil) {
        self.failWith = failWith
    }

    func receive(_ written: WrittenStallReport) throws {
        let entry = Seen(id: written.report.id, path: written.path, contentsPath: written.contentsPath,
                         publishedAlready: FileManager.default.fileExists(atPath: written.path),
                         contents: FileManager.default.contents(atPath: written.contentsPath))
        seen.withLock { $0.append(entry) }
        if let failWith { throw ConfigurationError(failWith) }
    }

    func start() { started.add(1, ordering: .relaxed) }
    func stop(deadline: Duration) { stopped.add(1, ordering: .relaxed) }
}

@Suite(.serialized)
struct StallReportSinkTests {
    @Test func sinksGetTheDurableReportBeforeItIsPublished() throws {
        let directory = makeTemporaryDirectory()
        let sink = RecordingSink()
        let loop = try Looper(name: "sinks")
        let monitor = try LooperStallMonitor(loop: loop, configuration: .init(
            detection: .init(threshold: .milliseconds(50)), reports: .init(directory: directory)),
                                             sinks: [sink])
        monitor.start()
        postChainedSpins(loop, count: 1, milliseconds: 120, label: "spin", detected: { monitor.statistics.stallsDetected }, then: { loop.stop() })
        loop.run(for: .seconds(60))
        monitor.stop()
        #expect(sink.started.load(ordering: .relaxed) == 1 && sink.stopped.load(ordering: .relaxed) == 1)
        let seen = sink.seen.withLock { $0 }
        let reports = readReports(directory)
        #expect(reports.count == 1 && seen.count == 1)
        let first = try #require(seen.first)
        #expect(!first.publishedAlready, "handed over before the report appears in the directory")
        #expect(first.contentsPath != first.path)
        #expect(first.id == reports.first?.id)
        #expect(first.contents == FileManager.default.contents(atPath: first.path),
                "the durable contents are exactly the published report")
    }

    @Test func aFailingSinkIsLoggedOnceAndTheReportsAreStillWritten() throws {
        let directory = makeTemporaryDirectory()
        let logs = InMemoryLogHandler()
        let sink = RecordingSink(failWith: "sink is down")
        let loop = try Looper(name: "failing-sink")
        let monitor = try LooperStallMonitor(loop: loop, configuration: .init(
            detection: .init(threshold: .milliseconds(50)), reports: .init(directory: directory)),
                                             logger: Logger(label: "test") { _ in logs }, sinks: [sink])
        monitor.start()
        postChainedSpins(loop, count: 3, milliseconds: 80, detected: { monitor.statistics.stallsDetected }, then: { loop.stop() })
        loop.run(for: .seconds(60))
        monitor.stop()
        // The three spins' reports (the label tells them from a stall a loaded machine may add, its start-up's say).
        let spins = readReports(directory).filter { $0.label == "chained" }
        #expect(spins.count == 3)
        // Each report offered (and, refused, offered again every second and at stop: issue 26 (8)); logged once.
        let seen = sink.seen.withLock { $0 }
        #expect(Set(spins.map(\.id)).isSubset(of: Set(seen.map(\.id))), "\(seen.count) offers")
        #expect(logs.entries.filter { "\($0.message)".contains("sink failed") }.count == 1, "once per change of state")
    }
}
