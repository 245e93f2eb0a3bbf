import Foundation
@testable import Stallmon
@testable import StallmonReport
import StallmonTestSupport
import Testing

/// `stallmon show FILE…`: one report in words, or the report itself as JSON.
@Suite("stallmon show")
struct ShowCommandTests {
    @Test("text: a Looper's mode other than the default, a NIO loop's phase, and what the thread waited on")
    func modeAndPhase() async throws {
        try await withTemporaryDirectory { directory in
            var report = Fixture.report(id: "5f1c2d3e-aaaa-bbbb-cccc-000000000002", durationMs: 250,
                                        topSymbol: "App.Worker.crunch()", loop: "main",
                                        start: "2026-01-10T12:34:56.789Z")
            report.mode = "tracking"
            let modal = try Fixture.write(report, named: "modal", in: directory)
            report.mode = nil
            report.phase = "io"
            report.waitingOn = [.init(kind: "socket", syscall: "read", target: "TCP 127.0.0.1:39514 → 10.0.0.5:5432",
                                      samples: 4),
                                .init(kind: "lock", syscall: "futex", target: "pthread mutex 0x10 held by thread 7 \"w\"",
                                      holderThread: 7, holderName: "w", samples: 1,
                                      holderStack: HottestStack(frames: [0], samples: 2, of: 3),
                                      holderTopFrame: .init(symbol: "App.Ledger.flush()", file: "Ledger.swift", line: 9),
                                      holderWaiting: "fsync /var/lib/ledger.db")]
            let nio = try Fixture.write(report, named: "nio", in: directory)
            let result = try await CLI.run(["show", modal, nio])
            #expect(result.status == 0, "\(result)")
            #expect(result.stdoutLines.contains("  running:  timer.tick  (in run-loop mode tracking)"), "\(result)")
            #expect(result.stdoutLines.contains("  running:  timer.tick  (io phase)"), "\(result)")
            #expect(result.stdoutLines.contains("  waiting:  read on TCP 127.0.0.1:39514 → 10.0.0.5:5432 (4 of 5 samples)"),
                    "\(result)")
            #expect(result.stdoutLines.contains(
                "  holder:   was running App.Ledger.flush() (Ledger.swift:9) (2 of 3 of its samples):"), "\(result)")
            #expect(result.stdoutLines.contains("  holder:   was itself blocked in fsync /var/lib/ledger.db"),
                    "\(result)")
        }
    }

    @Test("text: an async stall names its job, priority and executor, who measured it, and a traced request's trace")
    func asyncJob() async throws {
        try await withTemporaryDirectory { directory in
            var report = Fixture.report(id: "5f1c2d3e-aaaa-bbbb-cccc-000000000003", durationMs: 250,
                                        topSymbol: "App.Routes.encode()", loop: "swift-global-executor",
                                        start: "2026-01-10T12:34:56.789Z")
            report.job = .init(executor: "global", priority: "high", taskId: 42, kind: "task",
                               taskName: "checkout cart")
            let global = try Fixture.write(report, named: "global", in: directory)
            report.label = "GET /cart"
            report.traceId = "4bf92f3577b34da6a3ce929d0e0e4736"
            report.spanId = "00f067aa0ba902b7"
            let traced = try Fixture.write(report, named: "traced", in: directory)
            report.traceId = nil
            report.spanId = nil
            report.loop = "main-actor"
            report.job = .init(executor: "main", priority: "medium", taskId: nil, kind: "actor")
            let main = try Fixture.write(report, named: "main", in: directory)
            let result = try await CLI.run(["show", global, main])
            #expect(result.status == 0, "\(result)")
            #expect(!result.stdout.contains("trace:"), "untraced: no trace line")
            let tracedResult = try await CLI.run(["show", traced])
            #expect(tracedResult.stdoutLines.contains("  trace:    4bf92f3577b34da6a3ce929d0e0e4736 span 00f067aa0ba902b7"),
                    "\(tracedResult)")
            #expect(result.stdoutLines.contains("  job:      task 42 \"checkout cart\", priority high, on the global executor"),
                    "\(result)")
            #expect(result.stdoutLines.contains("  job:      actor, priority medium, on the main actor"), "\(result)")
            #expect(result.stdout.contains("measured by the job's worker"), "\(result)")
        }
    }

    @Test("text: id, loop, duration, top frame and the most common stack innermost first")
    func text() async throws {
        try await withTemporaryDirectory { directory in
            let report = Fixture.report(id: "5f1c2d3e-aaaa-bbbb-cccc-000000000001", durationMs: 250,
                                        topSymbol: "App.Worker.crunch()", loop: "request-loop",
                                        start: "2026-01-10T12:34:56.789Z")
            let path = try Fixture.write(report, named: "show", in: directory)
            let result = try await CLI.run(["show", path])
            #expect(result.status == 0, "\(result)")
            #expect(result.stderr.isEmpty, "\(result)")
            let lines = result.stdoutLines
            #expect(lines.first == "Stall 5f1c2d3e-aaaa-bbbb-cccc-000000000001", "\(result)")
            #expect(lines.contains("  file:     \(path)"), "\(result)")
            #expect(lines.contains("  loop:     request-loop  thread 4243 \"main-loop\"  pid 4242 on testhost"),
                    "\(result)")
            #expect(lines.contains("  started:  2026-01-10T12:34:56.789Z"), "\(result)")
            #expect(lines.contains("  lasted:   250.0 ms (threshold 100.0 ms; measured by the loop)"), "\(result)")
            #expect(lines.contains("  running:  timer.tick"), "\(result)")
            #expect(lines.contains("  top:      App.Worker.crunch() (Worker.swift:42)"), "\(result)")
            #expect(lines.contains { $0.hasPrefix("  samples:  5 taken, 4 with a stack, 1 timed out") }, "\(result)")
            #expect(!result.stdout.contains("ONGOING"))

            let heading = try #require(lines.firstIndex { $0.hasPrefix("Stack shared by") }, "\(result)")
            #expect(lines[heading] == "Stack shared by 3 of 5 samples, innermost first:")
            let stack = Array(lines[(heading + 1)...])
            #expect(stack.count == 4, "\(result)")
            guard stack.count == 4 else { return }
            let symbols = [Fixture.leafSymbol, "App.Worker.crunch()", Fixture.callerSymbol, "main"]
            for (depth, (line, symbol)) in zip(stack, symbols).enumerated() {
                #expect(line.contains("#\(depth) "), "\(line)")
                #expect(line.contains(symbol), "frame \(depth) should be \(symbol): \(line)")
            }
            // In-app frames are marked with '>', others are not.
            #expect(stack[0].hasPrefix("  #0 0x7f0000e5f2a0  __GI___nanosleep + 26"), "\(stack[0])")
            #expect(stack[0].hasSuffix("[libc.so.6+0xe5f2a0]"), "\(stack[0])")
            #expect(stack[1].hasPrefix("> #1 0x55550000a123  App.Worker.crunch() + 83  at Worker.swift:42"),
                    "\(stack[1])")
            #expect(stack[2].hasPrefix("> #2 "), "\(stack[2])")
            #expect(stack[2].contains("at Server.swift:17"), "\(stack[2])")
            #expect(stack[3].hasPrefix("> #3 "), "\(stack[3])")
        }
    }

    @Test("text: an ongoing report with no in-app frame and no stack")
    func ongoingWithoutStack() async throws {
        try await withTemporaryDirectory { directory in
            var report = Fixture.report(id: "ongoing-1", durationMs: 2400, topSymbol: nil, ongoing: true)
            report.samples = report.samples.map { sample in
                var sample = sample
                sample.frames = []
                sample.status = .timedOut
                return sample
            }
            let path = try Fixture.write(report, named: "ongoing", in: directory)
            let result = try await CLI.run(["show", path])
            #expect(result.status == 0, "\(result)")
            #expect(result.stdoutLines.first == "Stall ongoing-1  [ONGOING when written]", "\(result)")
            #expect(result.stdout.contains("lasted:   2.40 s (threshold 100.0 ms; estimated by the watchdog)"),
                    "\(result)")
            #expect(!result.stdout.contains("  top:"), "\(result)")
            #expect(result.stdout.contains("(no stack captured)"), "\(result)")
        }
    }

    @Test("--format json prints the report itself")
    func jsonRoundTrip() async throws {
        try await withTemporaryDirectory { directory in
            let report = Fixture.report(durationMs: 187.123456789, topSymbol: "App.Worker.crunch()",
                                        start: "2026-01-10T12:34:56.789Z")
            let path = try Fixture.write(report, named: "json", in: directory)
            let result = try await CLI.run(["show", "--format", "json", path])
            #expect(result.status == 0, "\(result)")
            #expect(result.stderr.isEmpty, "\(result)")
            let decoded = try JSONDecoder().decode(StallReport.self, from: Data(result.stdout.utf8))
            #expect(decoded == report)
            #expect(result.stdout.contains("\"schema\" : \"stallmon.report/1\""), "\(result)")
            #expect(result.stdout.contains(Fixture.appModule), "slashes are not escaped: \(result)")
        }
    }

    @Test("several reports are shown in order")
    func severalReports() async throws {
        try await withTemporaryDirectory { directory in
            let first = try Fixture.write(Fixture.report(id: "first-id", durationMs: 120, topSymbol: "A.a()"),
                                          named: "a", in: directory)
            let second = try Fixture.write(Fixture.report(id: "second-id", durationMs: 140, topSymbol: "B.b()"),
                                           named: "b", in: directory)
            let result = try await CLI.run(["show", first, second])
            #expect(result.status == 0, "\(result)")
            let firstIndex = try #require(result.stdout.range(of: "Stall first-id"), "\(result)")
            let secondIndex = try #require(result.stdout.range(of: "Stall second-id"), "\(result)")
            #expect(firstIndex.lowerBound < secondIndex.lowerBound)
            #expect(result.stdout.contains("\n\nStall second-id\n"), "a blank line between reports: \(result)")
        }
    }

    @Test("a file that is not a report: message on stderr, exit 1",
          arguments: [
              ("missing", "no such file"),
              ("empty", "empty file"),
              ("foreign", "not a stallmon report"),
              ("truncated", "not valid JSON"),
              ("future", "newer stallmon"),
              ("directory", "is a directory"),
          ])
    func badFile(kind: String, reason: String) async throws {
        try await withTemporaryDirectory { directory in
            let good = try Fixture.encode(Fixture.report(durationMs: 150, topSymbol: "A.a()"))
            let path: String
            switch kind {
            case "missing": path = directory.path("stall-missing.json")
            case "empty": path = try directory.write("stall-empty.json", Data())
            case "foreign": path = try directory.write("package.json", #"{"foo":1}"#)
            case "truncated": path = try directory.write("stall-cut.json", good.prefix(200))
            case "future":
                path = try directory.write("stall-future.json", String(decoding: good, as: UTF8.self)
                    .replacingOccurrences(of: "stallmon.report/1", with: "stallmon.report/9"))
            default:
                path = directory.path("stall-dir.json")
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
            }
            for format in ["text", "json"] {
                let result = try await CLI.run(["show", "--format", format, path])
                #expect(result.status == 1, "\(result)")
                #expect(result.stdout.isEmpty, "\(result)")
                #expect(result.stderrLines.count == 1, "\(result)")
                #expect(result.stderr.contains(path), "\(result)")
                #expect(result.stderr.contains(reason), "\(result)")
            }
        }
    }

    @Test("one bad file among several: exit 1, the good one still shown")
    func oneBadAmongMany() async throws {
        try await withTemporaryDirectory { directory in
            let good = try Fixture.write(Fixture.report(id: "good-report", durationMs: 150, topSymbol: "A.a()"),
                                         named: "good", in: directory)
            let bad = try directory.write("stall-bad.json", "")
            for arguments in [["show", bad, good], ["show", good, bad]] {
                let result = try await CLI.run(arguments)
                #expect(result.status == 1, "\(result)")
                #expect(result.stdout.contains("Stall good-report"), "\(result)")
                #expect(result.stdout.contains("A.a()"), "\(result)")
                #expect(result.stderrLines.count == 1, "\(result)")
                #expect(result.stderr.contains("\(bad): empty file"), "\(result)")
            }
        }
    }

    @Test("no file named: usage error")
    func noArguments() async throws {
        let result = try await CLI.run(["show"])
        #expect(result.status == 64, "\(result)")
        #expect(result.stdout.isEmpty, "\(result)")
        #expect(!result.stderr.isEmpty, "\(result)")
    }
}
