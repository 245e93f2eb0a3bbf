import Foundation
@testable import Stallmon
@testable import StallmonReport
import StallmonTestSupport
import Testing

/// `stallmon show` of a report with the analysis fields: hottest stack, class with thread figures, annotations,
/// signature, suppressed count.
@Suite("stallmon show: hottest stack, class, annotations, signature")
struct ShowHottestStackTests {
    static let signature = "9f8e7d6c5b4a3921"

    /// The fixture's most common exact stack is `[leaf, top, caller, main]` (3 of 5 samples), but its hottest
    /// stack is set to `[top, caller, main]` (4 of 4): the output must follow `hottestStack`.
    static func report() -> StallReport {
        var report = GroupFixture.report(id: "hot-1", durationMs: 250, topSymbol: "App.Worker.step()",
                                         stallClass: .cpu, signature: signature, suppressedBefore: 4)
        report.hottestStack = HottestStack(frames: [1, 2, 3], samples: 4, of: 4)
        report.threadStats = StallReport.ThreadFigures(windowMs: 250, cpuMs: 240.5, runDelayMs: 5.5, sleepMs: 4,
                                                       voluntarySwitches: 3, involuntarySwitches: 12)
        report.annotations = ["route": "/api/users", "request.id": "r-77"]
        return report
    }

    @Test("text: hottest stack in order, why: with class and figures, annotations, signature, suppressed")
    func text() async throws {
        try await withTemporaryDirectory { directory in
            let report = Self.report()
            let path = try Fixture.write(report, named: "hot", in: directory)
            let result = try await CLI.run(["show", path])
            try #require(result.status == 0, "\(result)")
            #expect(result.stderr.isEmpty, "\(result)")
            let lines = result.stdout.components(separatedBy: "\n")

            // why: class and the thread's figures.
            let why = try #require(lines.first { $0.trimmingCharacters(in: .whitespaces).hasPrefix("why:") },
                                   "\(result)")
            #expect(why.contains("cpu"), "\(why)")
            for figure in ["250.0 ms watched", "on CPU 240.5 ms", "waiting for a CPU 5.5 ms", "asleep 4.0 ms",
                           "3 voluntary", "12 involuntary"] {
                #expect(why.contains(figure), "\(figure) in: \(why)")
            }

            // Signature, suppressed count, annotations (sorted by key).
            #expect(lines.contains { $0.contains("signature \(Self.signature)") }, "\(result)")
            #expect(lines.contains { $0.contains("4 earlier stall(s) of this signature") }, "\(result)")
            let requestLine = try #require(lines.firstIndex { $0 == "  request.id: r-77" }, "\(result)")
            let routeLine = try #require(lines.firstIndex { $0 == "  route: /api/users" }, "\(result)")
            #expect(requestLine < routeLine, "annotations sorted by key")

            // The hottest stack, innermost first, exactly its frames.
            let headerIndex = try #require(
                lines.firstIndex { $0 == "Hottest stack, shared by 4 of 4 samples, innermost first:" }, "\(result)")
            #expect(requestLine < headerIndex && routeLine < headerIndex, "the stack comes last")
            let stackLines = Array(lines[(headerIndex + 1)...].prefix { !$0.isEmpty })
            let hottest = try #require(report.hottestStack)
            #expect(stackLines.count == hottest.frames.count, "\(stackLines)")
            for (depth, (line, index)) in zip(stackLines, hottest.frames).enumerated() {
                let frame = report.frames[index]
                #expect(line.contains("#\(depth) \(frame.address)"), "\(line)")
                #expect(line.contains(frame.symbol!), "\(line)")
                #expect(line.hasPrefix(frame.inApp ? ">" : " "), "in-app marker: \(line)")
            }
            #expect(stackLines.first?.contains("App.Worker.step() + 83  at Worker.swift:42") == true, "\(stackLines)")
            #expect(stackLines.first?.contains("[app+0xa123]") == true, "\(stackLines)")
            #expect(stackLines.last?.contains("main") == true, "\(stackLines)")
            #expect(!result.stdout.contains(Fixture.leafSymbol), "a frame outside the hottest stack: \(result)")
        }
    }

    @Test("without hottestStack the most common exact stack is shown")
    func fallback() async throws {
        try await withTemporaryDirectory { directory in
            var report = Self.report()
            report.hottestStack = nil
            let path = try Fixture.write(report, named: "cold", in: directory)
            let result = try await CLI.run(["show", path])
            try #require(result.status == 0, "\(result)")
            #expect(result.stdout.contains("Stack shared by 3 of 5 samples, innermost first:"), "\(result)")
            #expect(result.stdout.contains(Fixture.leafSymbol), "\(result)")
        }
    }

    @Test("a report without class, figures or signature prints no why:/group: lines")
    func absentFields() async throws {
        try await withTemporaryDirectory { directory in
            let path = try Fixture.write(Fixture.report(durationMs: 150, topSymbol: "A.a()"), named: "plain",
                                         in: directory)
            let result = try await CLI.run(["show", path])
            try #require(result.status == 0, "\(result)")
            #expect(!result.stdout.contains("why:"), "\(result)")
            #expect(!result.stdout.contains("signature"), "\(result)")
            #expect(!result.stdout.contains("earlier stall"), "\(result)")
        }
    }

    @Test("JSON round trip keeps the analysis fields under their documented keys")
    func json() async throws {
        try await withTemporaryDirectory { directory in
            let report = Self.report()
            let path = try Fixture.write(report, named: "hot", in: directory)
            let result = try await CLI.run(["show", "--format", "json", path])
            try #require(result.status == 0, "\(result)")
            #expect(try JSONDecoder().decode(StallReport.self, from: Data(result.stdout.utf8)) == report)
            let object = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8))
                as? [String: Any])
            #expect(object["class"] as? String == "cpu")
            #expect(object["signature"] as? String == Self.signature)
            #expect(object["suppressedBefore"] as? Int == 4)
            #expect((object["hottestStack"] as? [String: Any])?["of"] as? Int == 4)
        }
    }
}
