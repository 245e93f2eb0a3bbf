import CStallmonCapture
import CStallmonLoopShims
import Foundation
import InMemoryLogging
import Logging
@testable import Stallmon
import StallmonLoop
@testable import StallmonReport
import StallmonTestSupport
import Synchronization
import Testing

@Suite(.serialized)
struct StallMonitorTests {
    @Test func aStallOf300msIsReportedOnceWithItsDurationAndStack() throws {
        let directory = makeTemporaryDirectory()
        let loop = try Looper(name: "main")
        let monitor = try LooperStallMonitor(loop: loop, configuration: .init(
            detection: .init(threshold: .milliseconds(100)), reports: .init(directory: directory)))
        monitor.start()
        let spin = Mutex<MeasuredStall?>(nil)
        loop.schedule(after: .milliseconds(50), label: "spin-timer") {
            // 300 ms, and on until ten samples were taken (30 s at most), however late a loaded machine runs the
            // watchdog.
            let measured = MeasuredStall.timing {
                stallmonTestBusySpin(milliseconds: 300) { monitor.statistics.samplesCaptured >= 10 }
            }
            spin.withLock { $0 = measured }
        }
        loop.run(for: .milliseconds(800))
        monitor.stop()

        let reports = readReports(directory)
        #expect(reports.count == 1)
        let report = try #require(reports.first)
        #expect(!report.ongoing)
        #expect(report.durationSource == "loop")
        // The timer's iteration encloses the spin, and ends within 15 ms (plus the waits for a CPU and the frozen time
        // the report measures) after it.
        let measured = try #require(spin.withLock { $0 })
        let problem = measured.problem(with: report, headLimitMs: 50)
        #expect(problem == nil, "\(problem ?? "")")
        #expect(report.label == "spin-timer")
        #expect(report.samples.count >= 10)
        let symbols = report.frames.compactMap(\.symbol)
        #expect(symbols.contains { $0.contains("stallmonTestBusySpin") }, "\(symbols.prefix(20))")
        #expect(report.topFrame?.symbol.contains("stallmonTestBusySpin") == true, "\(String(describing: report.topFrame))")
        // A CPU-bound tight loop: the top frame still has file:line (the most common known line of the function).
        #expect(report.topFrame?.file?.hasSuffix("MonitorTestSupport.swift") == true && report.topFrame?.line != nil,
                "\(String(describing: report.topFrame))")
        #expect(monitor.statistics.stallsDetected == 1)
        #expect(monitor.statistics.reportsWritten == 1)
        print(String(data: try JSONEncoder().encode(report.topFrame), encoding: .utf8)!, report.captures)
    }
}

@Suite(.serialized)
struct StallMonitorBehaviourTests {
    @Test func theReportDirectoryExistsFromTheStartEvenWithoutAStall() throws {
        let directory = makeTemporaryDirectory() + "/not/yet/there"
        let loop = try Looper(name: "quiet")
        let monitor = try LooperStallMonitor(loop: loop, configuration: .init(
            detection: .init(threshold: .milliseconds(100)), reports: .init(directory: directory)))
        monitor.start()
        var info = stat()
        #expect(stat(directory, &info) == 0, "created at start()")
        #expect(info.st_mode & 0o777 == 0o700)
        loop.run(for: .milliseconds(50))
        monitor.stop()
        #expect(try ReportReader.scan(directory: directory).reports.isEmpty)
    }

    /// Start/stop races with the bind on the loop thread (the posted stallmon.bind, or entry) must never leak a
    /// capture slot or release one twice: 1,000 monitors started and stopped on a busy, running loop, then one more
    /// that must still get stacks; were slots leaked, the lowest free slot would have left the first block.
    @Test func aThousandStartStopCyclesOnABusyLoopLeakNoSlot() throws {
        let directory = makeTemporaryDirectory()
        let loop = try Looper(name: "churn")
        let busy = Atomic<Bool>(true)
        @Sendable func keepBusy() {
            guard busy.load(ordering: .relaxed) else { return }
            loop.perform(label: "busy") { usleep(50); keepBusy() }
        }
        keepBusy()
        let thread = runOnThread(loop, for: .seconds(120))
        defer { busy.store(false, ordering: .relaxed); loop.stop(); _ = thread }
        #expect(eventually { loop.isRunning })
        let configuration = StallMonitorConfiguration(detection: .init(threshold: .milliseconds(50)),
                                                      reports: .init(directory: directory))
        for cycle in 0..<1000 {
            let monitor = try LooperStallMonitor(loop: loop, configuration: configuration)
            monitor.start()
            if cycle % 3 == 0 { usleep(200) }  // sometimes after the bind, sometimes racing it
            monitor.stop()
        }
        let probe = cstallmon_slot_acquire(cstallmon_gettid())
        #expect(probe >= 0 && probe < CSTALLMON_SLOTS_PER_BLOCK, "no slot leaked by 1,000 cycles: \(probe)")
        cstallmon_slot_release(probe)
        let monitor = try LooperStallMonitor(loop: loop, configuration: configuration)
        monitor.start()
        #expect(eventually(timeout: .seconds(2)) { monitor.statistics.reportsWritten >= 0 })
        usleep(20_000)
        loop.perform(label: "spin") { _ = stallmonTestBusySpin(milliseconds: 150) }
        // A first report loads the test binary's DWARF: on a loaded machine that once took over 5 s.
        #expect(eventually(timeout: .seconds(30)) { monitor.statistics.reportsWritten == 1 })
        monitor.stop()
        let report = try #require(readReports(directory).first)
        #expect(report.samples.contains { $0.status == .ok && !$0.frames.isEmpty },
                "stacks still captured: \(report.samples.map(\.status))")
    }

    @Test func aLoopIdleInEpollForSecondsProducesNoReport() throws {
        let directory = makeTemporaryDirectory()
        let loop = try Looper(name: "idle")
        let monitor = try LooperStallMonitor(loop: loop, configuration: .init(
            detection: .init(threshold: .milliseconds(50)), reports: .init(directory: directory)))
        monitor.start()
        loop.schedule(every: .milliseconds(400), label: "rare") {}
        loop.run(for: .milliseconds(1500))
        monitor.stop()
        #expect(readReports(directory).isEmpty)
        #expect(monitor.statistics.stallsDetected == 0)
    }

    @Test func blocksQueuedTogetherRunInOnePassAndStallAsOne() throws {
        let directory = makeTemporaryDirectory()
        let loop = try Looper(name: "burst")
        let monitor = try LooperStallMonitor(loop: loop, configuration: .init(
            detection: .init(threshold: .milliseconds(100)), reports: .init(directory: directory)))
        monitor.start()
        for _ in 0..<4 { loop.perform(label: "burst") { _ = stallmonTestBusySpin(milliseconds: 40) } }
        loop.run(for: .milliseconds(500))
        monitor.stop()
        let reports = readReports(directory)
        #expect(reports.count == 1)
        #expect((reports.first?.durationMs ?? 0) >= 155, "the loop serviced nothing else for 4 × 40 ms")
    }

    @Test func manyIterationsJustUnderTheThresholdProduceNone() throws {
        let directory = makeTemporaryDirectory()
        let loop = try Looper(name: "almost")
        let monitor = try LooperStallMonitor(loop: loop, configuration: .init(
            detection: .init(threshold: .milliseconds(100)), reports: .init(directory: directory)))
        monitor.start()
        postChainedSpins(loop, count: 12, milliseconds: 70, label: "almost")
        loop.run(for: .milliseconds(1200))
        monitor.stop()
        // A spin that waited 30 ms for a CPU around its end is a true stall (a loaded machine), and its own figures
        // say so; no other report.
        let reports = readReports(directory)
        let others = reports.filter { !$0.isNearMissPushedOverByWaitingForACPU }
        #expect(others.isEmpty, "\(others.map { ($0.durationMs, $0.threadStats?.runDelayMs ?? 0) })")
        #expect(monitor.statistics.stallsDetected == reports.count)
    }

    @Test func aLongStallGetsAnInterimReportReplacedByTheFinalOne() throws {
        let directory = makeTemporaryDirectory()
        let loop = try Looper(name: "long")
        let monitor = try LooperStallMonitor(loop: loop, configuration: .init(
            detection: .init(threshold: .milliseconds(50), interimAfter: .milliseconds(250)), reports: .init(directory: directory)))
        monitor.start()
        let seenOngoing = Mutex<StallReport?>(nil)
        let stalledFor = Mutex<Double>(0)
        loop.perform(label: "long") {
            // At least 900 ms, and on until the interim report is on disk (at most 10 s): on a loaded machine the
            // writer's first symbolication can take longer than the 650 ms between the interim point and 900 ms.
            let start = MonotonicInstant.now()
            let earliestEnd = start.advanced(by: .milliseconds(900))
            let latestEnd = start.advanced(by: .seconds(10))
            while MonotonicInstant.now() < earliestEnd
                || (seenOngoing.withLock({ $0 }) == nil && MonotonicInstant.now() < latestEnd)
            {
                stallmonTestSleep(milliseconds: 20)
                if seenOngoing.withLock({ $0 }) == nil, let report = readReports(directory).first(where: \.ongoing) {
                    seenOngoing.withLock { $0 = report }
                }
            }
            stalledFor.withLock { $0 = Double(MonotonicInstant.now().nanoseconds - start.nanoseconds) / 1e6 }
        }
        loop.run(for: .milliseconds(1200))
        monitor.stop()
        let interim = try #require(seenOngoing.withLock { $0 }, "an ongoing report existed during the stall")
        #expect(interim.durationSource == "watchdog")
        let reports = readReports(directory)
        #expect(reports.count == 1, "the final report replaced the interim one")
        let final = try #require(reports.first)
        #expect(final.id == interim.id)
        #expect(!final.ongoing)
        let stalled = stalledFor.withLock { $0 }
        // Time set aside as a whole-process freeze is not in durationMs (it is frozenMs), by the report contract.
        let frozen = final.frozenMs ?? 0
        #expect(final.durationMs + frozen >= stalled - 1 && final.durationMs < stalled + 100,
                "\(final.durationMs) (+ \(frozen) frozen) vs \(stalled)")
        #expect(monitor.statistics.interimReportsWritten == 1)
    }

    @Test func reportFilesAreAtomicAndPrivate() throws {
        let root = makeTemporaryDirectory()
        let directory = root + "/nested/reports"
        let loop = try Looper(name: "files")
        let monitor = try LooperStallMonitor(loop: loop, configuration: .init(
            detection: .init(threshold: .milliseconds(50)), reports: .init(directory: directory)))
        monitor.start()
        // Each spin lasts until it was seen, however late a loaded machine runs the watchdog.
        postChainedSpins(loop, count: 3, milliseconds: 150, detected: { monitor.statistics.stallsDetected }, then: { loop.stop() })
        loop.run(for: .seconds(60))
        monitor.stop()
        let names = try FileManager.default.contentsOfDirectory(atPath: directory)
        #expect(!names.contains { $0.hasPrefix(".tmp") }, "no temporary files left: \(names)")
        #expect(names.filter { $0.hasPrefix("stall-") }.count == 3, "\(names)")
        var info = stat()
        stat(directory, &info)
        #expect(info.st_mode & 0o777 == 0o700)
        for name in names {
            stat(directory + "/" + name, &info)
            #expect(info.st_mode & 0o777 == 0o600, "\(name)")
            if name.hasPrefix("stall-") { _ = try ReportReader.read(directory + "/" + name) }
        }
        let log = try String(contentsOfFile: directory + "/events.jsonl", encoding: .utf8)
        let events = log.split(separator: "\n").map { try! JSONDecoder().decode(StallEvent.self, from: Data($0.utf8)) }
        #expect(events.filter { $0.event == "stall.begin" }.count == 3)
        let ends = events.filter { $0.event == "stall.end" }
        #expect(ends.count == 3)
        for end in ends {
            #expect(FileManager.default.fileExists(atPath: end.report ?? ""))
            #expect(end.topFrame?.contains("stallmonTestBusySpin") == true)
        }
    }

    @Test func anUnwritableReportDirectoryCountsDropsAndTheLoopKeepsRunning() throws {
        let root = makeTemporaryDirectory()
        let blocker = root + "/not-a-directory"
        _ = FileManager.default.createFile(atPath: blocker, contents: Data("x".utf8))
        let loop = try Looper(name: "unwritable")
        let logs = InMemoryLogHandler()
        let monitor = try LooperStallMonitor(loop: loop, configuration: .init(
            detection: .init(threshold: .milliseconds(50)), reports: .init(directory: blocker + "/reports")),
                                             logger: Logger(label: "test") { _ in logs })
        monitor.start()
        let ticks = Atomic<Int>(0)
        loop.schedule(every: .milliseconds(10)) { ticks.wrappingAdd(1, ordering: .relaxed) }
        // Then 300 ms of ticks before the loop stops.
        postChainedSpins(loop, count: 2, milliseconds: 150, detected: { monitor.statistics.stallsDetected },
                         then: { loop.schedule(after: .milliseconds(300)) { loop.stop() } })
        loop.run(for: .seconds(60))
        monitor.stop()
        // The two spins, and any tick a loaded machine kept waiting for a CPU past the threshold: each one dropped.
        #expect(monitor.statistics.stallsDetected >= 2)
        #expect(monitor.statistics.reportsDropped == monitor.statistics.stallsDetected)
        #expect(monitor.statistics.reportsWritten == 0)
        #expect(ticks.load(ordering: .relaxed) > 20, "the loop kept running")
        let errors = logs.entries.filter { $0.level == .error }
        #expect(errors.count == 1, "one error for the failing state, not one per report: \(errors)")
        #expect(errors.first?.metadata["directory"] == "\(blocker)/reports")
    }

    @Test func twoLoopsAreMonitoredAtOnceEachWithItsOwnThread() throws {
        let directory = makeTemporaryDirectory()
        let first = try Looper(name: "first")
        let second = try Looper(name: "second")
        let monitors = try [first, second].map {
            try LooperStallMonitor(loop: $0,
                                   configuration: .init(detection: .init(threshold: .milliseconds(60)),
                                                        reports: .init(directory: directory)))
        }
        monitors.forEach { $0.start() }
        first.perform(label: "first.work") { _ = stallmonTestBusySpin(milliseconds: 200) }
        second.perform(label: "second.work") { stallmonTestSleep(milliseconds: 200) }
        let other = runOnThread(second, for: .milliseconds(600))
        first.run(for: .milliseconds(600))
        _ = eventually { !second.isRunning }
        _ = other
        monitors.forEach { $0.stop() }
        let reports = readReports(directory)
        #expect(reports.count == 2)
        let byLoop = Dictionary(uniqueKeysWithValues: reports.map { ($0.loop, $0) })
        #expect(byLoop["first"]?.topFrame?.symbol.contains("stallmonTestBusySpin") == true)
        #expect(byLoop["second"]?.topFrame?.symbol.contains("stallmonTestSleep") == true)
        #expect(byLoop["first"]?.label == "first.work")
        #expect(byLoop["first"]?.thread.tid != byLoop["second"]?.thread.tid)
    }

    @Test func stoppingMidStallLeavesAnOngoingReport() throws {
        let directory = makeTemporaryDirectory()
        let loop = try Looper(name: "stopped")
        let monitor = try LooperStallMonitor(loop: loop, configuration: .init(
            detection: .init(threshold: .milliseconds(50)), reports: .init(directory: directory)))
        monitor.start()
        loop.perform {
            _ = stallmonTestBusySpin(milliseconds: 150)
            monitor.stop()  // from inside the stall, as a shutdown path would
            _ = stallmonTestBusySpin(milliseconds: 50)
        }
        loop.run(for: .milliseconds(400))
        let reports = readReports(directory)
        #expect(reports.count == 1)
        #expect(reports.first?.ongoing == true)
    }

    /// stop() right after a stall ended, before the watchdog's next pass saw it end (here 490 ms away): the stall is
    /// finished with its exact end, not cut short as ongoing. (A service stopping after the work that stalled.)
    @Test func stoppingRightAfterAStallEndedFinishesItWithItsExactEnd() throws {
        let directory = makeTemporaryDirectory()
        let loop = try Looper(name: "stopped-after")
        let monitor = try LooperStallMonitor(loop: loop, configuration: .init(
            detection: .init(threshold: .milliseconds(500), sampleInterval: .milliseconds(490)),
            reports: .init(directory: directory)))
        monitor.start()
        let spun = Mutex<Duration>(.zero)
        let stalled = DispatchSemaphore(value: 0)
        // From another thread, as soon as the iteration ended: the loop is idle by then.
        let stopper = Thread {
            stalled.wait()
            monitor.stop()
            loop.stop()
        }
        stopper.start()
        loop.perform(label: "stalled") {
            // Until the watchdog has begun the stall (however late a loaded machine runs it), then 50 ms more.
            let start = ContinuousClock.now
            stallmonTestBusySpin(milliseconds: 0) { monitor.statistics.stallsDetected > 0 }
            _ = stallmonTestBusySpin(milliseconds: 50)
            spun.withLock { $0 = ContinuousClock.now - start }
            loop.schedule(after: .milliseconds(1), label: "ended") { stalled.signal() }  // a later pass: it ended
        }
        loop.run(for: .seconds(60))
        let reports = readReports(directory)
        try #require(reports.count == 1)
        let report = try #require(reports.first)
        #expect(!report.ongoing)
        #expect(report.label == "stalled")
        #expect(report.durationSource == "loop")
        // The iteration encloses the spin (and is no watchdog's bound: its end is the loop's own).
        let spunMs = spun.withLock { $0 }.milliseconds
        #expect(report.durationMs >= spunMs, "\(report.durationMs) vs \(spunMs)")
    }
}
