import Foundation
@testable import Stallmon
@testable import StallmonReport
import StallmonTestSupport
import Testing

/// `stallmon demo`: a real monitored service that stalls for real, then `report`, `show` and `tail` on its output.
/// One demo run (about 5 s) feeds every check.
@Suite("stallmon demo (end to end)", .serialized)
struct DemoEndToEndTests {
    static func mode(_ path: String) -> mode_t? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return info.st_mode & 0o7777
    }

    @Test("demo writes real reports and an event log; report, show and tail read them")
    func demoEndToEnd() async throws {
        try await withTemporaryDirectory { temporary in
            // A directory that does not exist yet, so the demo creates it (with mode 0700).
            let directory = temporary.path("reports")
            let demo = try await CLI.run(["demo", "--seconds", "5", "--report-dir", directory],
                                         workingDirectory: temporary.url, timeout: .seconds(60))
            #expect(!demo.timedOut, "\(demo)")
            try #require(demo.status == 0, "\(demo)")
            let eventLog = directory + "/events.jsonl"
            #expect(demo.stdout.contains("  reports:   \(directory)/stall-*.json"), "\(demo)")
            #expect(demo.stdout.contains("  event log: \(eventLog)"), "\(demo)")

            // Reports.
            let names = try FileManager.default.contentsOfDirectory(atPath: directory)
            let reportPaths = names.filter { $0.hasPrefix("stall-") && $0.hasSuffix(".json") }.sorted()
                .map { directory + "/" + $0 }
            #expect(reportPaths.count >= 3, "files: \(names)\n\(demo)")
            #expect(!names.contains { $0.hasPrefix(".tmp-") }, "no temporary files left: \(names)")
            var reports: [String: StallReport] = [:]
            for path in reportPaths {
                let report = try ReportReader.read(path)
                reports[path] = report
                #expect(report.schema == StallReport.currentSchema)
                #expect(report.thresholdMs == 100, "\(path)")
                #expect(report.durationMs >= 100, "\(path): \(report.durationMs) ms")
                #expect(report.durationMs >= report.thresholdMs, "\(path)")
                #expect(report.durationSource == "loop", "\(path)")
                #expect(!report.ongoing, "\(path)")
                // The loop's stalls; on a machine loaded by the tests around it, a job of the demo's async code can
                // also be held up past the threshold, and the pool's monitor rightly reports it.
                #expect(["demo-main", "swift-global-executor"].contains(report.loop), "\(path)")
                #expect(path.contains(String(report.id.prefix(8))), "the file is named after the id: \(path)")
                #expect(demo.stdout.contains(path), "the demo lists its reports: \(path)")
                #expect(Self.mode(path) == 0o600, "\(path): mode \(String(Self.mode(path) ?? 0, radix: 8))")
            }
            #expect(Self.mode(directory) == 0o700, "directory mode \(String(Self.mode(directory) ?? 0, radix: 8))")
            let symbols = reports.values.compactMap(\.topFrame?.symbol)
            #expect(symbols.contains { $0.contains("crunchPrimes") }, "top frames: \(symbols)")
            #expect(symbols.contains { $0.contains("sleepOnTheLoop") }, "top frames: \(symbols)")
            let crunch = try #require(reports.first { $0.value.topFrame?.symbol.contains("crunchPrimes") == true },
                                      "no crunchPrimes report: \(symbols)")
            #expect(crunch.value.captures.succeeded > 0)
            #expect(crunch.value.samples.contains { !$0.frames.isEmpty })
            #expect(crunch.value.frames.contains { $0.inApp && $0.symbol?.contains("crunchPrimes") == true })

            // Event log.
            #expect(Self.mode(eventLog) == 0o600)
            let lines = try String(contentsOfFile: eventLog, encoding: .utf8).split(separator: "\n")
            let events = try lines.map { try JSONDecoder().decode(StallEvent.self, from: Data($0.utf8)) }
            let begins = events.filter { $0.event == "stall.begin" }
            let ends = events.filter { $0.event == "stall.end" }
            #expect(!begins.isEmpty, "\(lines)")
            #expect(ends.count == reportPaths.count, "one stall.end per report: \(lines)")
            for end in ends {
                let report = try #require(end.report, "stall.end without a report: \(end)")
                #expect(FileManager.default.fileExists(atPath: report), "\(report)")
                #expect(reports[report]?.id == end.id, "\(end)")
                #expect(end.durationMs == reports[report]?.durationMs, "\(end)")
                #expect(begins.contains { $0.id == end.id }, "a stall.begin precedes \(end)")
            }

            // `stallmon report` groups them.
            let summaryRun = try await CLI.run(["report", directory, "--format", "json"])
            #expect(summaryRun.status == 0, "\(summaryRun)")
            #expect(summaryRun.stderr.isEmpty, "\(summaryRun)")
            let summary = try JSONDecoder().decode(StallSummary.self, from: Data(summaryRun.stdout.utf8))
            #expect(summary.stalls == reportPaths.count)
            #expect(summary.unreadable == 0)
            #expect(summary.loops.contains("demo-main") && Set(summary.loops).isSubset(of: ["demo-main", "swift-global-executor"]),
                    "\(summary.loops)")
            #expect(summary.groups.map(\.count).reduce(0, +) == reportPaths.count)
            #expect(summary.groups.contains { $0.topFrame.contains("crunchPrimes") && $0.count >= 1 },
                    "\(summary.groups.map(\.topFrame))")
            #expect(summary.groups.contains { $0.topFrame.contains("sleepOnTheLoop") && $0.count >= 1 },
                    "\(summary.groups.map(\.topFrame))")
            #expect((summary.durationMs?.max ?? 0) >= 100)
            let text = try await CLI.run(["report", directory])
            #expect(text.status == 0, "\(text)")
            #expect(text.stdout.hasPrefix("Stalls in \(directory): \(reportPaths.count)\n"), "\(text)")
            #expect(text.stdout.contains("crunchPrimes"), "\(text)")

            // `stallmon show` on a real report.
            let show = try await CLI.run(["show", crunch.key])
            #expect(show.status == 0, "\(show)")
            #expect(show.stdout.contains("  loop:     demo-main"), "\(show)")
            #expect(show.stdout.contains("measured by the loop"), "\(show)")
            let shown = show.stdoutLines
            #expect(shown.contains { $0.hasPrefix("  top:") && $0.contains("crunchPrimes") }, "\(show)")
            #expect(shown.contains { $0.hasPrefix("> #") && $0.contains("crunchPrimes") },
                    "an in-app frame of the stack: \(show)")

            // `stallmon tail` on the real log.
            let tail = try await CLI.run(["tail", "-n", "1000", eventLog])
            #expect(tail.status == 0, "\(tail)")
            #expect(tail.stderr.isEmpty, "\(tail)")
            #expect(tail.stdoutLines.count == events.count, "\(tail)")
            #expect(tail.stdoutLines.filter { $0.contains("  stall.end  ") }.count == ends.count, "\(tail)")
        }
    }

    /// README, "The two commands": each stall of the demo is topped by the function the table names.
    @Test("every demo stall is topped by the function the README's table names")
    func theReadmeTableIsTrue() async throws {
        try await withTemporaryDirectory { temporary in
            let run = try await DemoRun.run(in: temporary, name: "table", ["--seconds", "8.5"])
            try #require(run.result.status == 0, "\(run.result)")
            let readme = try String(contentsOfFile: PackageProductsTests.repository + "/README.md", encoding: .utf8)
            for function in ["DemoStalls.crunchPrimes", "DemoStalls.sleepOnTheLoop", "DemoStalls.readFromSlowPeer",
                             "ContendedLock.acquireAndRelease", "DemoStalls.encodeLargeJSON",
                             "DemoStalls.renderReportInTask"] {
                #expect(readme.contains("`\(function)`"), "the table names \(function)")
                let name = String(function.split(separator: ".").last!)
                #expect(!run.reports(topIn: name).isEmpty,
                        "a report topped by \(function); tops: \(run.reports.values.compactMap(\.topFrame?.symbol))")
            }
            // Six injected stalls, and any short iteration a loaded machine kept waiting for a CPU past the threshold.
            let injected = run.reports.values.filter { !$0.isNearMissPushedOverByWaitingForACPU }
            #expect(injected.count == 6, "six stalls in 8.5 s: \(run.reports.values.map { ($0.label, $0.durationMs) })")
            // The async one is the global executor's, on a worker, not the loop's.
            let task = run.reports(topIn: "renderReportInTask").first?.report
            #expect(task?.loop == "swift-global-executor" && task?.job?.executor == "global",
                    "\(String(describing: task?.loop)) \(String(describing: task?.job))")
            // …and says what the blocked ones waited on, as the table says.
            let peer = run.reports(topIn: "readFromSlowPeer").first?.report.waitingOn?.first
            #expect(peer?.kind == "socket" && peer?.syscall == "read", "\(String(describing: peer))")
            #expect(peer?.target?.hasPrefix("TCP 127.0.0.1:") == true && peer?.target?.contains(" → 127.0.0.1:") == true,
                    "\(String(describing: peer))")
            let lock = run.reports(topIn: "acquireAndRelease").first?.report.waitingOn?.first
            #expect(lock?.holderName == "ledger-writer", "\(String(describing: lock))")
            #expect(lock?.target?.hasPrefix("pthread mutex 0x") == true, "\(String(describing: lock))")
            // …and what that holder was running: its own stack, sampled while the loop waited.
            #expect(lock?.holderTopFrame?.symbol.contains("ContendedLock.flushLedger") == true,
                    "\(String(describing: lock?.holderTopFrame))")
        }
    }
}
