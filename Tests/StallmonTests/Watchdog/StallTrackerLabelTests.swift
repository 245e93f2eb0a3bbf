@testable import Stallmon
import StallmonLoop
@testable import StallmonReport
import StallmonTestSupport
import Testing

/// The label a stall's report names is the stalled iteration's work, read while it still ran: a watchdog a loaded
/// machine runs late may read the label only after the loop moved on to its next block.
@Suite(.serialized)
struct StallTrackerLabelTests {
    static let ms = StallTrackerHangTests.ms
    static let since = StallTrackerHangTests.since

    /// Begins a stall of iteration 1 with `target`, ends it, and returns its report's label.
    func label(of target: StallTracker.Target) throws -> String? {
        let directory = makeTemporaryDirectory("stall-tracker-label")
        let (tracker, writer, client) = StallTrackerHangTests.makeTracker(directory: directory)
        writer.start(firstClient: client)
        defer { writer.stop(timeout: .seconds(10)) }
        let freezes = FreezeTracker()
        _ = tracker.step(StallTrackerHangTests.busy, now: Self.since + 150 * Self.ms, target: target, freezes: freezes)
        #expect(tracker.isStalled)
        _ = tracker.step(.idle(completedIterations: 1), now: Self.since + 200 * Self.ms, target: target, freezes: freezes)
        #expect(!tracker.isStalled)
        #expect(writer.flush(timeout: .seconds(30)) == 0)
        let reports = readReports(directory)
        try #require(reports.count == 1)
        return reports[0].label
    }

    @Test func theLabelReadWhileTheIterationRunsIsTheReports() throws {
        let stalled = LooperLabel("tracker.stalled-block")
        var target = StallTrackerHangTests.target
        target.currentLabel = { LooperLabel("tracker.unchecked").id }
        target.labelOfIteration = { iteration in iteration == 1 ? stalled.id : nil }
        #expect(try label(of: target) == "tracker.stalled-block")
    }

    /// Before: the label was read unchecked, and the report named the next block. Now it has the empty label, as a
    /// loop's report has for work without a name.
    @Test func aLabelReadAfterTheLoopMovedOnIsLeftOut() throws {
        let next = LooperLabel("tracker.next-block")
        var target = StallTrackerHangTests.target
        target.currentLabel = { next.id }
        target.labelOfIteration = { _ in nil }
        let found = try label(of: target)
        #expect(found == "", "the empty label, not the next block's: \(String(describing: found))")
    }
}
