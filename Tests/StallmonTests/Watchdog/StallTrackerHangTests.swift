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
    static func makeTracker(directory: String, hangs: HangRegistry = HangRegistry())
        -> (tracker: StallTracker, writer: ReportWriter, client: PipelineMember) {
        var configuration = StallMonitorConfiguration(
            detection: .init(threshold: .milliseconds(100), interimAfter: .milliseconds(2000)), reports: .init(directory: directory))
        configuration.hangs.systemdHangAfter = .seconds(1)
        let logger = Logger(label: "stallmon.test", factory: { _ in SwiftLogNoOpLogHandler() })
        let client = PipelineMember(configuration: configuration, logger: logger, counters: MonitorCounters(),
                                  loopName: "hung", sinks: [])
        let writer = ReportWriter(directory: directory)
        let collaborators = StallTracker.Collaborators(
            client: client, writer: writer, hangs: hangs, contention: CPUContention(), systemdIsFed: { true },
            stallCounter: Counter(label: "stallmon_test_stalls"),
            stallDuration: Metrics.Timer(label: "stallmon_test_stall_duration"))
        let tracker = StallTracker(loopName: "hung", annotations: nil, collaborators: collaborators)
        return (tracker, writer, client)
    }

    /// No capture (none is possible on a made-up thread), no /proc figures (tid 0 has none).
    static var target: StallTracker.Target {
        StallTracker.Target(tid: 0, capture: nil, longIterationRecord: { _ in nil })
    }

    @Test func aHangIsActedOnOnceItsReportIsHandled() {
        // The writer is not started: nothing will write the report, and the hang is acted on at once.
        let (tracker, _, _) = Self.makeTracker(directory: makeTemporaryDirectory("stall-tracker-hang"))
        let freezes = FreezeTracker()
        let begun = tracker.step(Self.busy, now: Self.since + 150 * Self.ms, target: Self.target, freezes: freezes)
        #expect(tracker.isStalled)
        #expect(!begun.waitedOnItsOwnWork, "no capture")
        let before = tracker.step(Self.busy, now: Self.since + 900 * Self.ms, target: Self.target, freezes: freezes)
        #expect(before.wakeAt <= Self.since + 1000 * Self.ms, "a pass is planned at the limit")
        let hung = tracker.step(Self.busy, now: Self.since + 1000 * Self.ms, target: Self.target, freezes: freezes)
        #expect(!hung.waitedOnItsOwnWork, "the pass never waits for the writer")
        #expect(tracker.hangProgress == (.actedOn, .notYet))
        tracker.stopMidStall(now: Self.since + 1020 * Self.ms, tid: 0, freezes: freezes)
        #expect(!tracker.isStalled)
    }

    /// A writer blocked (here in `flock` on an event log another process holds) never holds up the pass that found
    /// the hang, nor the later ones, which every other stall of a shared watchdog would wait for too (issue 42,
    /// item 1). The hang is acted on once its report is durable, or after 5 s without it.
    @Test func aBlockedWriterNeverHoldsUpThePass() throws {
        let directory = makeTemporaryDirectory("stall-tracker-hang")
        let hangs = HangRegistry()
        let (tracker, writer, client) = Self.makeTracker(directory: directory, hangs: hangs)
        let log = client.configuration.reports.resolvedEventLogPath
        let holder = open(log, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        try #require(holder >= 0 && flock(holder, LOCK_EX) == 0)
        var held = true
        defer {
            if held { flock(holder, LOCK_UN) }
            close(holder)
        }
        writer.start(firstClient: client)
        defer { writer.stop(timeout: .seconds(10)) }
        let freezes = FreezeTracker()
        _ = tracker.step(Self.busy, now: Self.since + 150 * Self.ms, target: Self.target, freezes: freezes)
        let hung = tracker.step(Self.busy, now: Self.since + 1000 * Self.ms, target: Self.target, freezes: freezes)
        #expect(!hung.waitedOnItsOwnWork)
        #expect(hung.wakeAt <= Self.since + 1005 * Self.ms, "it looks again soon: \(hung.wakeAt - Self.since)")
        guard case .writing = tracker.hangProgress.systemd else {
            Issue.record("the writer cannot have written it: \(tracker.hangProgress)")
            return
        }
        #expect(hangs.oldestHung() == nil, "not hung for systemd before its report is durable")

        // The writer gets the lock: the next pass after it wrote acts on the hang.
        flock(holder, LOCK_UN)
        held = false
        #expect(writer.flush(timeout: .seconds(30)) == 0)
        _ = tracker.step(Self.busy, now: Self.since + 1010 * Self.ms, target: Self.target, freezes: freezes)
        #expect(tracker.hangProgress.systemd == .actedOn)
        #expect(hangs.oldestHung() != nil, "hung for systemd once its report is durable")
        #expect(readReports(directory).first?.hang == StallReport.Hang(action: "watchdog", afterMs: 1000))
        tracker.stopMidStall(now: Self.since + 1020 * Self.ms, tid: 0, freezes: freezes)
    }

    /// With the writer blocked for good, the hang is acted on 5 s after its limit all the same.
    @Test func aHangWhoseReportCannotBeWrittenIsActedOnAfterFiveSeconds() throws {
        let directory = makeTemporaryDirectory("stall-tracker-hang")
        let (tracker, writer, client) = Self.makeTracker(directory: directory)
        let holder = open(client.configuration.reports.resolvedEventLogPath, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        try #require(holder >= 0 && flock(holder, LOCK_EX) == 0)
        defer {
            flock(holder, LOCK_UN)
            close(holder)
            writer.stop(timeout: .seconds(10))
        }
        writer.start(firstClient: client)
        let freezes = FreezeTracker()
        _ = tracker.step(Self.busy, now: Self.since + 150 * Self.ms, target: Self.target, freezes: freezes)
        _ = tracker.step(Self.busy, now: Self.since + 1000 * Self.ms, target: Self.target, freezes: freezes)
        let waiting = tracker.step(Self.busy, now: Self.since + 5999 * Self.ms, target: Self.target, freezes: freezes)
        #expect(waiting.wakeAt <= Self.since + 6000 * Self.ms)
        #expect(tracker.hangProgress.systemd != .actedOn)
        _ = tracker.step(Self.busy, now: Self.since + 6000 * Self.ms, target: Self.target, freezes: freezes)
        #expect(tracker.hangProgress.systemd == .actedOn)
        tracker.stopMidStall(now: Self.since + 6010 * Self.ms, tid: 0, freezes: freezes)
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
        var configuration = StallMonitorConfiguration(
            detection: .init(threshold: .milliseconds(100), sampleInterval: .milliseconds(1000), interimAfter: .milliseconds(2000)), reports: .init(directory: makeTemporaryDirectory("stall-tracker-hang")))
        configuration.hangs.action = .abort
        configuration.hangs.abortAfter = .milliseconds(1500)
        let logger = Logger(label: "stallmon.test", factory: { _ in SwiftLogNoOpLogHandler() })
        let client = PipelineMember(configuration: configuration, logger: logger, counters: MonitorCounters(),
                                  loopName: "hung", sinks: [])
        let collaborators = StallTracker.Collaborators(
            client: client, writer: ReportWriter(directory: configuration.reports.directory), hangs: HangRegistry(), contention: CPUContention(),
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
