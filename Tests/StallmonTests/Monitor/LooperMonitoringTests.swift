import Foundation
@testable import Stallmon
import StallmonLoop
@testable import StallmonReport
import StallmonTestSupport
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// An actor pinned to a monitored loop: its methods are the loop's iterations.
actor MonitoredLedger {
    let loop: Looper

    init(loop: Looper) {
        self.loop = loop
    }

    nonisolated var unownedExecutor: UnownedSerialExecutor { loop.asUnownedSerialExecutor() }

    /// Blocks the loop thread for `milliseconds`, directly in this method (the top in-app frame).
    func flushLedgerToDisk(milliseconds: Int) {
        usleep(UInt32(milliseconds * 1000))
    }

    /// Suspends for `milliseconds`: the loop is free meanwhile.
    func awaitReplica(milliseconds: Int) async throws {
        try await Task.sleep(for: .milliseconds(milliseconds))
    }
}

/// The stall monitor on the `Looper`'s newer parts: nested runs in modes, actors on the loop, every-iteration
/// figures.
@Suite(.serialized)
struct LooperMonitoringTests {
    static let modal: LooperMode = "tests.monitor.modal"

    private func monitor(_ loop: Looper, _ directory: String, statsInterval: Duration = .seconds(60)) throws
        -> LooperStallMonitor
    {
        try LooperStallMonitor(loop: loop, configuration: .init(
            detection: .init(threshold: .milliseconds(100)), reports: .init(directory: directory), analysis: .init(loopStatsInterval: statsInterval)))
    }

    @Test func aNestedRunThatServicesItsSourcesIsNotAStall() throws {
        let directory = makeTemporaryDirectory()
        let loop = try Looper(name: "modal-wait")
        let monitor = try monitor(loop, directory)
        monitor.start()
        let ticks = Atomic<Int>(0)
        loop.schedule(every: .milliseconds(10), mode: Self.modal) { ticks.add(1, ordering: .relaxed) }
        loop.perform {
            // A modal wait of 600 ms, six times the threshold, that keeps servicing its timer.
            loop.run(in: Self.modal, for: .milliseconds(600))
            loop.stop()
        }
        loop.run(for: .seconds(5))
        monitor.stop()
        #expect(ticks.load(ordering: .relaxed) >= 20)
        #expect(readReports(directory).isEmpty)
        #expect(monitor.statistics.stallsDetected == 0)
        #expect(monitor.statistics.longIterations == 0)
    }

    @Test func aCallbackThatStallsInsideANestedRunIsReportedWithItsMode() throws {
        let directory = makeTemporaryDirectory()
        let loop = try Looper(name: "modal-stall")
        let monitor = try monitor(loop, directory)
        monitor.start()
        let modalSleep = Mutex<MeasuredStall?>(nil)
        loop.schedule(after: .milliseconds(50), label: "modal-timer", mode: Self.modal) {
            let measured = MeasuredStall.timing { stallmonTestSleep(milliseconds: 250) }
            modalSleep.withLock { $0 = measured }
        }
        loop.perform {
            loop.run(in: Self.modal, for: .milliseconds(500))
            loop.schedule(after: .milliseconds(30), label: "default-timer") { stallmonTestSleep(milliseconds: 200) }
            loop.schedule(after: .milliseconds(400)) { loop.stop() }
        }
        loop.run(for: .seconds(5))
        monitor.stop()
        let reports = readReports(directory).sorted { $0.start.wall < $1.start.wall }
        #expect(reports.count == 2)
        #expect(reports.first?.mode == Self.modal.name)
        #expect(reports.first?.label == "modal-timer")
        // The nested run's iteration is the timer's: it encloses the sleep, and ends within 15 ms (plus the waits for a
        // CPU and the frozen time the report measures) after it.
        let sleep = try #require(modalSleep.withLock { $0 })
        let modal = try #require(reports.first)
        let problem = sleep.problem(with: modal, headLimitMs: 50)
        #expect(problem == nil, "\(problem ?? "")")
        #expect(reports.last?.mode == "default")
        #expect(reports.last?.label == "default-timer")
        let events = try String(contentsOfFile: directory + "/events.jsonl", encoding: .utf8)
        #expect(events.contains("\"mode\":\"tests.monitor.modal\""))
    }

    @Test func aStallInAnActorMethodOnTheLoopNamesTheMethod() async throws {
        let directory = makeTemporaryDirectory()
        let loop = try Looper(name: "actor-loop")
        let monitor = try monitor(loop, directory)
        monitor.start()
        let thread = runOnThread(loop, for: .seconds(20))
        defer { loop.stop(); _ = thread }
        #expect(eventually { loop.isRunning })
        let ledger = MonitoredLedger(loop: loop)
        // An await that suspends for three thresholds is no stall: the loop is idle meanwhile.
        try await ledger.awaitReplica(milliseconds: 300)
        #expect(monitor.statistics.stallsDetected == 0)
        await ledger.flushLedgerToDisk(milliseconds: 250)
        #expect(eventually { monitor.statistics.reportsWritten == 1 })
        loop.stop()
        monitor.stop()
        let report = try #require(readReports(directory).first)
        #expect(report.topFrame?.symbol.contains("flushLedgerToDisk") == true,
                "\(String(describing: report.topFrame?.symbol))")
        #expect(report.label.hasPrefix("async"), "\(report.label)")
        #expect(report.stallClass == .blocked)
    }

    @Test func everyIterationIsCountedAndAHalfBusyLoopIsHalfUtilized() throws {
        let directory = makeTemporaryDirectory()
        let loop = try Looper(name: "half-busy")
        let monitor = try monitor(loop, directory, statsInterval: .milliseconds(300))
        monitor.start()
        // 20 ms busy (blocked, so the CPU stays free for the rest of the suite) every 40 ms.
        loop.schedule(every: .milliseconds(40), label: "half") { stallmonTestSleep(milliseconds: 20) }
        loop.run(for: .milliseconds(1300))
        let statistics = monitor.statistics.loop
        monitor.stop()
        #expect(statistics.iterations >= 25)
        #expect(abs(statistics.utilization - 0.5) <= 0.1, "utilization \(statistics.utilization)")
        let p50 = try #require(statistics.busyHistogram.percentile(0.5))
        // Each busy iteration lasts the 20 ms sleep plus the timer's few microseconds (and the scheduler's wake-up
        // latency on a loaded machine), read back within the bucket's 3.2 %.
        #expect(p50 >= .microseconds(19_300) && p50 <= .milliseconds(26), "p50 \(p50)")

        let lines = try String(contentsOfFile: directory + "/events.jsonl", encoding: .utf8)
            .split(separator: "\n").map { try JSONDecoder().decode(StallEvent.self, from: Data($0.utf8)) }
            .filter { $0.event == "loop.stats" }
        #expect(lines.count >= 2, "\(lines.count) loop.stats lines")
        let line = try #require(lines.last)
        #expect(line.loop == "half-busy")
        #expect((line.windowS ?? 0) >= 0.29)
        #expect(abs((line.utilization ?? 0) - 0.5) <= 0.15, "\(String(describing: line.utilization))")
        #expect((line.busyP99Ms ?? 0) >= 19.3)
        #expect((line.iterations ?? 0) >= 5)
    }
}
