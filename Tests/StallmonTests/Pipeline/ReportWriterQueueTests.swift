import Foundation
import Logging
@testable import Stallmon
import StallmonTestSupport
import Testing

/// A `.finish` the full queue refuses was only counted: what the writer kept for its stall (the rate limit's decision,
/// the interim's path) stayed forever, one leak per dropped final (issue 41, item 7).
struct ReportWriterQueueTests {
    static func snapshot(_ id: String) -> StallEvidence {
        StallEvidence(id: id, loopName: "main", threadID: 1, thresholdNanoseconds: 50_000_000, since: 1_000_000_000,
                      sinceWall: 1_700_000_000_000_000_000, durationNanoseconds: 200_000_000, durationExact: true,
                      ongoing: true, elapsedAtDetection: 50_000_000, labelID: 0, samples: [])
    }

    @Test func aFinalRefusedByTheFullQueueLeavesNothingKept() throws {
        let directory = makeTemporaryDirectory("writer-queue")
        let configuration = StallMonitorConfiguration(detection: .init(threshold: .milliseconds(50)),
                                                      reports: .init(directory: directory))
        let client = PipelineMember(configuration: configuration,
                                  logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }),
                                  counters: MonitorCounters(), loopName: "main", sinks: [])
        // Not started yet: the queue fills. First the stall's interim, then the rest of the queue, then its final.
        let writer = ReportWriter(directory: directory)
        #expect(writer.submit(.interim(Self.snapshot("kept")), from: client))
        for index in 1..<WriterQueue.limit {
            #expect(writer.submit(.interim(Self.snapshot("other-\(index)")), from: client))
        }
        #expect(!writer.submit(.finish(Self.snapshot("kept")), from: client), "refused: the queue is full")
        // The others' finals come once there is room again; "kept"'s never will.
        writer.start(firstClient: client)
        defer { writer.stop(timeout: .seconds(10)) }
        #expect(writer.flush(timeout: .seconds(60)) == 0)
        for index in 1..<WriterQueue.limit {
            #expect(writer.submit(.finish(Self.snapshot("other-\(index)")), from: client))
            if index % 500 == 0 { #expect(writer.flush(timeout: .seconds(60)) == 0) }
        }
        #expect(writer.flush(timeout: .seconds(60)) == 0)
        #expect(writer.entriesKeptForStalls.load(ordering: .relaxed) == 0, "nothing kept for the stall whose final was refused")
        #expect(client.counters.reportsDropped.load(ordering: .relaxed) == 1)
    }
}
