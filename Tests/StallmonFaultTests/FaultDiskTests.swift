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

#if canImport(Glibc)
import Glibc
#endif

/// A monitored loop running on its own thread with a 10 ms ticker; the test thread drives it in phases (inject
/// stalls, break or repair the disk) and reads the monitor's counters and logs between them.
final class FaultDiskHarness {
    let directory: String
    let loop: Looper
    let monitor: LooperStallMonitor
    let logs = InMemoryLogHandler()
    let ticks = FaultCounter()
    private var timer: LooperTimer?
    private var thread: Thread?

    init(reportDirectory: String, name: String) throws {
        directory = reportDirectory
        loop = try Looper(name: name)
        let logs = logs
        monitor = try LooperStallMonitor(loop: loop, configuration: .init(
            detection: .init(threshold: .milliseconds(50)), reports: .init(directory: reportDirectory)),
                                         logger: Logger(label: "fault.disk") { _ in logs })
        monitor.start()
        let ticks = ticks
        timer = loop.schedule(every: .milliseconds(10), label: "fault.tick") { ticks.increment() }
        thread = runOnThread(loop, for: .seconds(120))
        _ = eventually(timeout: .seconds(5)) { self.loop.isRunning }
    }

    var statistics: StallMonitorStatistics { monitor.statistics }
    var tickCount: Int { ticks.value }

    /// Injects `count` stalls of 100 ms, each until detected (each its own loop pass), and waits, bounded, until the
    /// writer has dealt with every one of them (report written or dropped). False on timeout.
    func stall(_ count: Int) -> Bool {
        let before = statistics
        let monitor = monitor
        postChainedSpins(loop, count: count, milliseconds: 100, label: "fault.disk.spin",
                         detected: { monitor.statistics.stallsDetected })
        return eventually(timeout: .seconds(40)) {
            let now = self.statistics
            return now.stallsDetected >= before.stallsDetected + count
                && now.reportsWritten + now.reportsDropped >= before.reportsWritten + before.reportsDropped + count
        }
    }

    /// Whether the ticker fires at least `count` more times within 3 s: the loop is running, not wedged.
    func keepsTicking(_ count: Int = 10) -> Bool {
        let before = tickCount
        return eventually(timeout: .seconds(3)) { self.tickCount >= before + count }
    }

    var errors: [InMemoryLogHandler.Entry] { logs.entries.filter { $0.level == .error } }
    var recoveries: [InMemoryLogHandler.Entry] {
        logs.entries.filter { $0.level == .notice && "\($0.message)".contains("written again") }
    }

    /// Stops the loop (bounded wait) and the monitor.
    func finish() {
        timer?.cancel()
        loop.stop()
        _ = eventually(timeout: .seconds(5)) { !self.loop.isRunning }
        monitor.stop()
    }

    /// Every `stall-*.json` parses and no temporary file was left behind.
    func checkDirectory(_ context: String) {
        let names = faultListing(directory)
        #expect(!names.contains { $0.hasPrefix(".tmp-") }, "\(context): no temporary file left: \(names)")
        do {
            let scan = try ReportReader.scan(directory: directory)
            #expect(scan.problems.isEmpty, "\(context): \(scan.problems.map(\.description))")
            #expect(scan.reports.count == names.filter { $0.hasPrefix("stall-") }.count)
        } catch {
            Issue.record("\(context): the report directory cannot be read: \(error)")
        }
    }
}

/// A shareable atomic counter.
final class FaultCounter: Sendable {
    private let storage = Atomic<Int>(0)
    func increment() { storage.wrappingAdd(1, ordering: .relaxed) }
    var value: Int { storage.load(ordering: .relaxed) }
}

/// What a disk-trouble scenario observed.
struct FaultDiskOutcome {
    var statistics: StallMonitorStatistics
    var errors: [InMemoryLogHandler.Entry]
    var recoveries: [InMemoryLogHandler.Entry]
    var mechanism: String
    /// Newline-terminated lines of the event log that are not whole events.
    var tornEventLines: [String] = []
}

extension FaultTests {
    /// The report directory becomes unusable while the monitor runs. The loop must not notice (its ticker keeps
    /// firing during and after), stalls are still detected, failed reports are counted as dropped, the failure is
    /// logged once and the recovery once, and reports are written again when the disk is repaired.
    @Suite("Fault: disk trouble", .serialized)
    struct FaultDiskTests {
        // MARK: (a) read-only report directory

        /// Root ignores permission bits (chmod 0500 stops nobody here), so the directory is made read-only for real:
        /// a read-only bind mount of it (writes fail with EROFS), switched back to read-write for the recovery.
        /// Without mount privileges the report path goes through a regular file instead (mkdir fails with
        /// ENOTDIR), and the recovery replaces that file with a directory.
        static func readOnlyScenario() throws -> FaultDiskOutcome {
            let root = makeTemporaryDirectory("faultReadOnly")
            defer { try? FileManager.default.removeItem(atPath: root) }
            let source = root + "/source"
            let mounted = root + "/mounted"
            try FileManager.default.createDirectory(atPath: source + "/reports", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: mounted, withIntermediateDirectories: true)
            let useMount = FaultMount.available && FaultMount.bindReadOnly(source, at: mounted)
            var isMounted = useMount
            defer { if isMounted { FaultMount.unmount(mounted) } }
            let directory = useMount ? mounted + "/reports" : root + "/blocker/reports"
            if !useMount { _ = FileManager.default.createFile(atPath: root + "/blocker", contents: Data("x".utf8)) }

            let harness = try FaultDiskHarness(reportDirectory: directory, name: "fault-readonly")
            defer { harness.finish() }
            #expect(harness.keepsTicking(), "the loop runs")
            #expect(harness.stall(2), "two stalls were handled while the directory is read-only")
            #expect(harness.keepsTicking(), "the loop kept running while reports failed")
            var statistics = harness.statistics
            #expect(statistics.reportsDropped == 2 && statistics.reportsWritten == 0, "\(statistics)")
            #expect(statistics.eventsDropped > 0 || !useMount, "event-log lines failed too: \(statistics)")

            if useMount {
                #expect(FaultMount.remount(mounted, readOnly: false), "remounted read-write")
            } else {
                try FileManager.default.removeItem(atPath: root + "/blocker")
                try FileManager.default.createDirectory(atPath: root + "/blocker", withIntermediateDirectories: false)
            }
            #expect(harness.stall(1), "a stall after the repair was handled")
            #expect(harness.keepsTicking(), "the loop runs after the repair")
            statistics = harness.statistics
            #expect(statistics.reportsWritten == 1, "reports are written again: \(statistics)")
            harness.checkDirectory("read-only")
            harness.finish()
            if isMounted {
                FaultMount.unmount(mounted)
                isMounted = false
            }
            return FaultDiskOutcome(statistics: harness.statistics, errors: harness.errors,
                                    recoveries: harness.recoveries,
                                    mechanism: useMount ? "read-only bind mount (EROFS)" : "path through a file (ENOTDIR)")
        }

        @Test func faultReadOnlyReportDirectoryDropsCountsAndRecovers() throws {
            let outcome = try Self.readOnlyScenario()
            print("Fault read-only (\(outcome.mechanism)): \(outcome.statistics); \(outcome.errors.count) error logs: "
                + outcome.errors.map { "\($0.metadata["error"] ?? "?")" }.joined(separator: " | "))
            #expect(outcome.statistics.stallsDetected == 3, "every stall was detected: \(outcome.statistics)")
            #expect(outcome.statistics.reportsDropped == 2)
            #expect(outcome.statistics.reportsWritten == 1)
            #expect(outcome.errors.count == 1, "one error for the failing state, not one per report: \(outcome.errors)")
            #expect(outcome.recoveries.count == 1, "the recovery was logged once")
            #expect(outcome.recoveries.first?.metadata["dropped"] == "2", "\(outcome.recoveries)")
        }

        // MARK: (b) report directory deleted while the monitor runs

        @Test func faultReportDirectoryDeletedWhileRunningIsRecreated() throws {
            let root = makeTemporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: root) }
            let directory = root + "/reports"
            let harness = try FaultDiskHarness(reportDirectory: directory, name: "fault-deleted")
            defer { harness.finish() }

            #expect(harness.stall(1))
            #expect(harness.statistics.reportsWritten == 1)
            try FileManager.default.removeItem(atPath: directory)
            #expect(harness.keepsTicking())
            #expect(harness.stall(1), "a stall after the deletion was handled")
            #expect(harness.statistics.reportsWritten == 2, "written into a recreated directory: \(harness.statistics)")
            #expect(harness.statistics.reportsDropped == 0)
            #expect(harness.errors.isEmpty, "a recreated directory is no error: \(harness.errors)")
            var info = stat()
            #expect(stat(directory, &info) == 0 && info.st_mode & 0o777 == 0o700, "recreated private")
            // The writer counts the report before it appends the event line: give the line a moment.
            #expect(eventually(timeout: .seconds(5)) {
                faultCompleteLines(directory + "/events.jsonl").lines.contains { $0.contains("\"stall.end\"") }
            }, "the event log was recreated")

            // Now delete it again and again while stalls are being reported.
            let hammering = Atomic<Bool>(true)
            let deletions = Atomic<Int>(0)
            let hammer = Thread {
                while hammering.load(ordering: .relaxed) {
                    if (try? FileManager.default.removeItem(atPath: directory)) != nil {
                        deletions.wrappingAdd(1, ordering: .relaxed)
                    }
                    usleep(1_000)
                }
            }
            hammer.start()
            let handled = harness.stall(3)
            let ticked = harness.keepsTicking()
            hammering.store(false, ordering: .relaxed)
            usleep(20_000)
            #expect(handled, "stalls were handled while the directory kept disappearing")
            #expect(ticked, "the loop kept running meanwhile")
            let during = harness.statistics
            #expect(during.reportsWritten + during.reportsDropped == 5, "every report written or counted: \(during)")

            #expect(harness.stall(1), "a stall after the hammering was handled")
            #expect(harness.keepsTicking())
            let final = harness.statistics
            harness.finish()
            print("Fault deleted-directory: \(deletions.load(ordering: .relaxed)) deletions while reporting; \(final); "
                + "\(harness.errors.count) error logs, \(harness.recoveries.count) recovery logs")
            #expect(final.stallsDetected == 6, "every stall was detected: \(final)")
            #expect(final.reportsWritten == during.reportsWritten + 1, "the last report was written: \(final)")
            #expect(final.reportsWritten + final.reportsDropped == 6)
            #expect(harness.errors.count <= final.reportsDropped, "never more than one error per dropped report")
            if final.reportsDropped > 0 {
                #expect(!harness.errors.isEmpty, "drops were logged")
                #expect(harness.recoveries.count >= 1, "and the recovery too")
            }
            harness.checkDirectory("deleted")
            for line in faultCompleteLines(directory + "/events.jsonl").lines {
                #expect(throws: Never.self) { _ = try JSONDecoder().decode(StallEvent.self, from: Data(line.utf8)) }
            }
        }

        // MARK: (c) full disk

        /// A small tmpfs holds the report directory; a filler file takes every free block. Without mount privileges
        /// the test falls back to `stallmon demo` run under RLIMIT_FSIZE (see `fullDiskFallback`).
        static func fullDiskScenario() throws -> FaultDiskOutcome? {
            guard FaultMount.available else { return nil }
            let root = makeTemporaryDirectory("faultFullDisk")
            defer { try? FileManager.default.removeItem(atPath: root) }
            let disk = root + "/disk"
            try FileManager.default.createDirectory(atPath: disk, withIntermediateDirectories: true)
            try #require(FaultMount.tmpfs(at: disk, size: "2m"), "mounted a 2 MiB tmpfs")
            defer { FaultMount.unmount(disk) }  // after the harness's defer below has stopped the monitor
            let directory = disk + "/reports"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)

            let harness = try FaultDiskHarness(reportDirectory: directory, name: "fault-full")
            defer { harness.finish() }
            #expect(harness.stall(1), "a stall before the disk fills was handled")
            #expect(harness.statistics.reportsWritten == 1)

            // Pad the event log (with a valid line) to 8 bytes short of a page, so the next line needs a new block
            // the full disk does not have: a torn line would show.
            let logPath = directory + "/events.jsonl"
            // The writer appends the stall's end line after counting its report: wait for it, or it could land
            // after the size is read and push the padding off the page boundary (seen once on a loaded run).
            #expect(eventually {
                ((try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "").contains("\"stall.end\"")
            }, "the first stall's end line is in the log")
            let size = Int((try? FileManager.default.attributesOfItem(atPath: logPath)[.size] as? Int) ?? 0)
            let target = ((size + 200) / 4096 + 1) * 4096 - 8
            let skeleton = #"{"time":"2026-01-01T00:00:00.000Z","event":"fault.padding","message":""}"# + "\n"
            let padding = String(skeleton.dropLast(3)) + String(repeating: "p", count: target - size - skeleton.utf8.count)
                + "\"}\n"
            let logFD = open(logPath, O_WRONLY | O_APPEND)
            try #require(logFD >= 0)
            #expect(write(logFD, padding, padding.utf8.count) == padding.utf8.count)
            close(logFD)

            let filler = open(disk + "/filler", O_WRONLY | O_CREAT | O_TRUNC, 0o600)
            try #require(filler >= 0)
            let chunk = [UInt8](repeating: 0xF1, count: 4096)
            var filled = 0
            while filled < 64 << 20 {
                let written = chunk.withUnsafeBytes { write(filler, $0.baseAddress, $0.count) }
                if written <= 0 { break }
                filled += written
            }
            close(filler)
            let probe = open(disk + "/probe", O_WRONLY | O_CREAT, 0o600)
            let probeWrite = chunk.withUnsafeBytes { write(probe, $0.baseAddress, $0.count) }
            let probeError = errno
            close(probe)
            unlink(disk + "/probe")
            #expect(probeWrite < 0 && probeError == ENOSPC, "the disk is full")

            #expect(harness.stall(2), "two stalls were handled on a full disk")
            #expect(harness.keepsTicking(), "the loop kept running while the disk was full")
            var statistics = harness.statistics
            #expect(statistics.reportsDropped == 2 && statistics.reportsWritten == 1, "\(statistics)")
            #expect(statistics.eventsDropped > 0, "event-log lines failed too: \(statistics)")

            unlink(disk + "/filler")
            #expect(harness.stall(1), "a stall after space was freed was handled")
            #expect(harness.keepsTicking(), "the loop runs after the repair")
            statistics = harness.statistics
            #expect(statistics.reportsWritten == 2, "reports are written again: \(statistics)")
            harness.checkDirectory("full disk")
            harness.finish()
            var outcome = FaultDiskOutcome(statistics: harness.statistics, errors: harness.errors,
                                           recoveries: harness.recoveries, mechanism: "full tmpfs (ENOSPC)")
            outcome.tornEventLines = faultCompleteLines(logPath).lines.filter { line in
                (try? JSONDecoder().decode(StallEvent.self, from: Data(line.utf8))) == nil
            }.map(String.init)
            return outcome
        }

        /// Without mount privileges: `stallmon demo` under RLIMIT_FSIZE of 16 blocks with SIGXFSZ ignored, so every
        /// report write fails with EFBIG (reports are ~35 KB) while the small event log and stdout still fit.
        static func fullDiskFallback() throws {
            let executable = try StallmonExecutable.url().path
            let root = makeTemporaryDirectory("faultFileSizeLimit")
            defer { try? FileManager.default.removeItem(atPath: root) }
            let shell = try #require(findTool("sh"))
            let child = try ChildProcess(shell, [
                "-c", #"trap '' XFSZ; ulimit -f 16 && exec "$0" "$@""#, executable, "demo", "--seconds", "2.5",
                "--stalls", "cpu", "--threshold-ms", "50", "--report-dir", root + "/reports",
            ], environment: StallmonExecutable.environment(), stdoutPath: root + "/out", stderrPath: root + "/err")
            #expect(child.wait(timeout: .seconds(30)), "the demo finished")
            child.kill()
            let output = ((try? String(contentsOfFile: root + "/out", encoding: .utf8)) ?? "")
                + ((try? String(contentsOfFile: root + "/err", encoding: .utf8)) ?? "")
            print("Fault full disk (RLIMIT_FSIZE fallback):\n\(output)")
            #expect(child.terminatingSignal == nil, "the demo was not killed by SIGXFSZ or a crash")
            let monitorLine = try #require(output.split(separator: "\n").first { $0.hasPrefix("Monitor:") })
            let numbers = monitorLine.split(whereSeparator: { !$0.isNumber }).compactMap { Int($0) }
            try #require(numbers.count >= 3, "\(monitorLine)")
            let (detected, written, dropped) = (numbers[0], numbers[1], numbers[2])
            #expect(detected >= 1 && written == 0 && dropped == detected, "\(monitorLine)")
            let serviceLine = try #require(output.split(separator: "\n").first { $0.hasPrefix("Service:") })
            let heartbeats = serviceLine.split(whereSeparator: { !$0.isNumber }).compactMap { Int($0) }.first ?? 0
            #expect(heartbeats > 20, "the loop kept running: \(serviceLine)")
            let errorLines = output.split(separator: "\n").filter { $0.contains("cannot write stall reports") }
            #expect(errorLines.count >= 1 && errorLines.count <= dropped, "logged, at most once per drop")
        }

        @Test func faultFullDiskDropsCountsAndRecovers() throws {
            guard let outcome = try Self.fullDiskScenario() else {
                try Self.fullDiskFallback()
                return
            }
            print("Fault full disk (\(outcome.mechanism)): \(outcome.statistics); \(outcome.errors.count) error logs: "
                + outcome.errors.map { "\($0.metadata["error"] ?? "?")" }.joined(separator: " | "))
            #expect(outcome.statistics.stallsDetected == 4, "every stall was detected: \(outcome.statistics)")
            #expect(outcome.statistics.reportsDropped == 2)
            #expect(outcome.statistics.reportsWritten == 2)
            #expect(outcome.errors.count == 1, "one error for the failing state, not one per report: \(outcome.errors)")
            #expect(outcome.recoveries.count == 1, "the recovery was logged once")
            #expect(outcome.recoveries.first?.metadata["dropped"] == "2", "\(outcome.recoveries)")
            #expect(outcome.tornEventLines.isEmpty,
                    "every complete line of the event log is a whole event: \(outcome.tornEventLines)")
        }
    }
}
