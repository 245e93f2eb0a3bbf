import Foundation
import Logging
import Metrics
@testable import Stallmon
import StallmonLoop
@testable import StallmonReport
import StallmonTestSupport
import Testing

/// `StallTracker` driven pass by pass from the test's thread, with probe readings and a clock of the test's own: a
/// loop that hangs past `systemd_hang_after_ms` (1 s) while systemd's watchdog is fed (issue 32, item 4).
@Suite(.serialized)
struct StallTrackerHangTests {
    static let ms: UInt64 = 1_000_000
    /// When the hung iteration began (synthetic CLOCK_MONOTONIC).
    static let since: UInt64 = 10_000 * ms
    static let busy = LoopProbe.Reading.busy(iteration: 1, since: since)

    /// A tracker whose hang limit is 1 s and interim report due at 2 s, writing through `writer` (started or not).
    static func makeTracker(directory: String) -> (tracker: StallTracker, writer: ReportWriter, client: ReportClient) {
        var configuration = StallMonitorConfiguration(threshold: .milliseconds(100), interimAfter: .milliseconds(2000),
                                                      reportDirectory: directory)
        configuration.systemdHangAfter = .seconds(1)
        let logger = Logger(label: "stallmon.test", factory: { _ in SwiftLogNoOpLogHandler() })
        let client = ReportClient(configuration: configuration, logger: logger, counters: MonitorCounters(),
                                  loopName: "hung", sinks: [])
        let writer = ReportWriter(directory: directory)
        let collaborators = StallTracker.Collaborators(
            client: client, writer: writer, hangs: HangRegistry(), systemdIsFed: { true },
            stallCounter: Counter(label: "stallmon_test_stalls"),
            stallDuration: Metrics.Timer(label: "stallmon_test_stall_duration"))
        let tracker = StallTracker(loopName: "hung", annotations: nil, collaborators: collaborators)
        return (tracker, writer, client)
    }

    /// No capture (none is possible on a made-up thread), no /proc figures (tid 0 has none).
    static var target: StallTracker.Target {
        StallTracker.Target(tid: 0, capture: nil, longIterationRecord: { _ in nil })
    }

    @Test func thePassThatMakesAHangDurableWaitedOnItsOwnWork() {
        // The writer is not started: its flush returns at once; what is asked of the pass is what counts here.
        let (tracker, _, _) = Self.makeTracker(directory: makeTemporaryDirectory("stall-tracker-hang"))
        let freezes = FreezeTracker()
        let begun = tracker.step(Self.busy, now: Self.since + 150 * Self.ms, target: Self.target, freezes: freezes)
        #expect(tracker.isStalled)
        #expect(!begun.waitedOnItsOwnWork, "no capture, no durable write")
        let before = tracker.step(Self.busy, now: Self.since + 900 * Self.ms, target: Self.target, freezes: freezes)
        #expect(!before.waitedOnItsOwnWork)
        let hung = tracker.step(Self.busy, now: Self.since + 1000 * Self.ms, target: Self.target, freezes: freezes)
        #expect(hung.waitedOnItsOwnWork, "it waited for the hang's report to be durable: its length is no freeze")
        let after = tracker.step(Self.busy, now: Self.since + 1010 * Self.ms, target: Self.target, freezes: freezes)
        #expect(!after.waitedOnItsOwnWork, "the hang is made durable once")
        tracker.stopMidStall(now: Self.since + 1020 * Self.ms, tid: 0, freezes: freezes)
        #expect(!tracker.isStalled)
    }

    /// The interim report and the one written at stop replace the hang's on disk: they must still carry `hang`.
    @Test func aHungStallsLaterOngoingReportsKeepItsHang() throws {
        let directory = makeTemporaryDirectory("stall-tracker-hang")
        let (tracker, writer, client) = Self.makeTracker(directory: directory)
        writer.start(firstClient: client)
        defer { writer.stop(timeout: .seconds(10)) }
        let freezes = FreezeTracker()
        let expected = StallReport.Hang(action: "watchdog", afterMs: 1000)
        _ = tracker.step(Self.busy, now: Self.since + 150 * Self.ms, target: Self.target, freezes: freezes)
        _ = tracker.step(Self.busy, now: Self.since + 1000 * Self.ms, target: Self.target, freezes: freezes)
        // The pass waited up to 5 s for it; the writer's first report (its symbolicator made) may take longer here.
        #expect(writer.flush(timeout: .seconds(30)) == 0)
        let hang = try #require(readReports(directory).first, "the hang's report")
        #expect(hang.hang == expected && hang.ongoing)
        #expect(hang.frozenMs == nil, "nothing was frozen")

        _ = tracker.step(Self.busy, now: Self.since + 2000 * Self.ms, target: Self.target, freezes: freezes)
        #expect(writer.flush(timeout: .seconds(30)) == 0)
        let interim = try #require(readReports(directory).first)
        #expect(readReports(directory).count == 1, "the interim replaced the hang's report")
        #expect(interim.durationMs == 2000, "the interim is written: \(interim.durationMs)")
        #expect(interim.hang == expected, "the interim kept the hang")

        tracker.stopMidStall(now: Self.since + 2500 * Self.ms, tid: 0, freezes: freezes)
        #expect(writer.flush(timeout: .seconds(30)) == 0)
        let stopped = try #require(readReports(directory).first)
        #expect(stopped.durationMs == 2500 && stopped.ongoing, "written at stop: \(stopped.durationMs)")
        #expect(stopped.hang == expected, "the report written at stop kept the hang")
        #expect(stopped.frozenMs == nil)
    }

    /// Time the whole process was frozen is set aside in the report written at stop, as in an interim one.
    @Test func theReportWrittenAtStopSetsFrozenTimeAside() throws {
        let directory = makeTemporaryDirectory("stall-tracker-hang")
        let (tracker, writer, client) = Self.makeTracker(directory: directory)
        writer.start(firstClient: client)
        defer { writer.stop(timeout: .seconds(10)) }
        var freezes = FreezeTracker()
        _ = tracker.step(Self.busy, now: Self.since + 150 * Self.ms, target: Self.target, freezes: freezes)
        // SIGSTOP for 300 ms, seen by the watchdog's late wake-up.
        freezes.record(start: Self.since + 160 * Self.ms, end: Self.since + 460 * Self.ms)
        tracker.stopMidStall(now: Self.since + 600 * Self.ms, tid: 0, freezes: freezes)
        #expect(writer.flush(timeout: .seconds(30)) == 0)
        let stopped = try #require(readReports(directory).first)
        #expect(stopped.frozenMs == 300)
        #expect(stopped.durationMs == 300, "600 ms since the iteration began, 300 of them frozen")
        #expect(stopped.hang == nil, "never hung: the freeze does not count")
    }

    /// The final report replaces the hang's (the README's contract): the stall is over, it has no `hang`.
    @Test func aHungStallsFinalReportHasNoHang() throws {
        let directory = makeTemporaryDirectory("stall-tracker-hang")
        let (tracker, writer, client) = Self.makeTracker(directory: directory)
        writer.start(firstClient: client)
        defer { writer.stop(timeout: .seconds(10)) }
        let freezes = FreezeTracker()
        _ = tracker.step(Self.busy, now: Self.since + 150 * Self.ms, target: Self.target, freezes: freezes)
        _ = tracker.step(Self.busy, now: Self.since + 1000 * Self.ms, target: Self.target, freezes: freezes)
        _ = tracker.step(.idle(completedIterations: 1), now: Self.since + 1200 * Self.ms, target: Self.target,
                         freezes: freezes)
        #expect(!tracker.isStalled)
        #expect(writer.flush(timeout: .seconds(30)) == 0)
        let final = try #require(readReports(directory).first)
        #expect(!final.ongoing && final.hang == nil)
    }

    /// `hang_action = abort`: the watchdog plans a pass at the limit itself, whatever its sampling cadence, so the
    /// abort is late only by the system's scheduling (the end-to-end test, `DemoDrivenTests`, sees the real one).
    @Test func anAbortLimitIsAPlannedPass() {
        var configuration = StallMonitorConfiguration(threshold: .milliseconds(100),
                                                      sampleInterval: .milliseconds(1000),
                                                      interimAfter: .milliseconds(2000),
                                                      reportDirectory: makeTemporaryDirectory("stall-tracker-hang"))
        configuration.hangAction = .abort
        configuration.hangAbortAfter = .milliseconds(1500)
        let logger = Logger(label: "stallmon.test", factory: { _ in SwiftLogNoOpLogHandler() })
        let client = ReportClient(configuration: configuration, logger: logger, counters: MonitorCounters(),
                                  loopName: "hung", sinks: [])
        let collaborators = StallTracker.Collaborators(
            client: client, writer: ReportWriter(directory: configuration.reportDirectory), hangs: HangRegistry(),
            systemdIsFed: { false }, stallCounter: Counter(label: "stallmon_test_stalls"),
            stallDuration: Metrics.Timer(label: "stallmon_test_stall_duration"))
        let tracker = StallTracker(loopName: "hung", annotations: nil, collaborators: collaborators)
        let freezes = FreezeTracker()
        let begun = tracker.step(Self.busy, now: Self.since + 150 * Self.ms, target: Self.target, freezes: freezes)
        #expect(begun.wakeAt == Self.since + 1150 * Self.ms, "the next sample comes first")
        let sampled = tracker.step(Self.busy, now: Self.since + 1150 * Self.ms, target: Self.target, freezes: freezes)
        #expect(sampled.wakeAt == Self.since + 1500 * Self.ms, "the limit, before the sample (2150) and interim (2000)")
        tracker.stopMidStall(now: Self.since + 1200 * Self.ms, tid: 0, freezes: freezes)
    }
}
