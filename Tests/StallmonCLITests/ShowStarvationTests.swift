import Foundation
@testable import StallmonReport
import StallmonTestSupport
import Testing

/// `stallmon show` of a starved pool's report: the saturation, the jobs that waited, the verdict, and each culprit
/// with its job, class, wait and stack.
@Suite("stallmon show: starvation")
struct ShowStarvationTests {
    static func report() -> StallReport {
        var report = ShowHottestStackTests.report()
        report.loop = "swift-global-executor"
        report.kind = "starvation"
        let culprit = StallReport.Culprit(
            thread: .init(tid: 4755, name: "worker-a"),
            job: .init(executor: "global", priority: "medium", taskId: 24, kind: "task", taskName: "GET /users/{id}"),
            busyMs: 303.2, heldThroughout: true, stallClass: .blocked, topFrame: report.topFrame,
            hottestStack: HottestStack(frames: [1, 2], samples: 3, of: 3),
            waitingOn: [.init(kind: "sleep", syscall: "nanosleep", target: nil, holderThread: nil, holderName: nil,
                              samples: 3)],
            signature: "c264abf44894d2a0", samples: 3)
        var second = culprit
        second.thread = .init(tid: 4756, name: "worker-b")
        second.job?.taskId = 25
        second.job?.taskName = nil
        second.heldThroughout = false
        second.busyMs = 10.4
        report.starvation = StallReport.Starvation(verdict: "blocked", saturatedMs: 303.1, oldestWaitMs: 276.8,
                                                   waitedJobs: 20, jobsRun: 25, workers: 2,
                                                   culprits: [culprit, second])
        return report
    }

    @Test("text: saturation, waits, verdict, then every culprit with its job, class, wait and stack")
    func text() async throws {
        try await withTemporaryDirectory { directory in
            let report = Self.report()
            let path = try Fixture.write(report, named: "starved", in: directory)
            let result = try await CLI.run(["show", path])
            try #require(result.status == 0, "\(result)")
            let lines = result.stdoutLines
            #expect(lines.first == "Starvation \(report.id)", "\(result)")
            #expect(lines.contains("  pool:     swift-global-executor  2 workers, all busy  pid 4242 on testhost"),
                    "\(result)")
            #expect(lines.contains("  lasted:   saturated 303.1 ms; the oldest job waited 276.8 ms (threshold 100.0 ms)"),
                    "\(result)")
            #expect(lines.contains("  jobs:     20 waited past the threshold; 25 ran meanwhile"), "\(result)")
            #expect(lines.contains { $0.hasPrefix("  why:      blocked: workers held by jobs that waited") }, "\(result)")
            #expect(lines.contains("Culprit 1: thread 4755 \"worker-a\", busy 303.2 ms, held its worker throughout"),
                    "\(result)")
            #expect(lines.contains("  job:      task 24 \"GET /users/{id}\", priority medium"), "\(result)")
            #expect(lines.contains("  waiting:  nanosleep (3 of 3 samples)"), "\(result)")
            #expect(lines.contains("Culprit 2: thread 4756 \"worker-b\", busy 10.4 ms"), "\(result)")
            let stackHeader = try #require(lines.firstIndex { $0 == "  stack, 3 of 3 samples, innermost first:" },
                                           "\(result)")
            #expect(lines[stackHeader + 1].contains("#0 \(report.frames[1].address)"), "\(result)")
            #expect(lines[stackHeader + 2].contains("#1 \(report.frames[2].address)"), "\(result)")
        }
    }

    @Test("report: a starvation's group is marked starved:, its JSON group has kind starvation")
    func reportGroups() async throws {
        try await withTemporaryDirectory { directory in
            var starved = Self.report()
            starved.signature = "5a5a5a5a5a5a5a5a"
            _ = try Fixture.write(starved, named: "20260110T123456.789Z-starved", in: directory)
            var stall = ShowHottestStackTests.report()
            stall.id = "plain-1"
            _ = try Fixture.write(stall, named: "20260110T123457.789Z-plain", in: directory)
            let text = try await CLI.run(["report", directory.path])
            #expect(text.status == 0, "\(text)")
            #expect(text.stdoutLines.contains { $0.contains("starved:cpu") && $0.contains("5a5a5a5a") }, "\(text)")
            #expect(text.stdoutLines.contains { $0.contains("  cpu  ") && $0.contains(ShowHottestStackTests.signature.prefix(8)) },
                    "\(text)")
            let json = try await CLI.run(["report", "--format", "json", directory.path])
            let summary = try JSONDecoder().decode(StallSummary.self, from: Data(json.stdout.utf8))
            #expect(summary.groups.first { $0.signature == "5a5a5a5a5a5a5a5a" }?.kind == "starvation")
            #expect(summary.groups.first { $0.signature == ShowHottestStackTests.signature }?.kind == nil)
        }
    }
}
