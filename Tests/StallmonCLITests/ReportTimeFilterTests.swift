import Foundation
@testable import Stallmon
@testable import StallmonReport
import StallmonTestSupport
import Testing

/// `stallmon report --since/--until/--loop`: which reports are summarized, by start time and loop.
@Suite("stallmon report --since/--until/--loop")
struct ReportTimeFilterTests {
    /// Five reports at known ISO start times on two loops; file names run opposite to start order.
    static let fixed: [(id: String, start: String, loop: String)] = [
        ("r1", "2026-03-01T08:00:00.000Z", "main"),
        ("r2", "2026-03-01T10:00:00.000Z", "io"),
        ("r3", "2026-03-02T09:30:00.000Z", "main"),
        ("r4", "2026-03-03T00:00:00.000Z", "io"),
        ("r5", "2026-03-04T12:00:00.500Z", "main"),
    ]

    static func writeFixed(in directory: TemporaryDirectory) throws {
        for (index, entry) in fixed.enumerated() {
            let report = GroupFixture.report(id: entry.id, durationMs: 150 + Double(index) * 10,
                                             topSymbol: "App.Step\(index).run()", start: entry.start,
                                             loop: entry.loop)
            try Fixture.write(report, named: "\(9 - index)", in: directory)
        }
    }

    /// The ids summarized by `report DIR --format json extra…`, in start order (group ids merged).
    static func selectedIds(_ directory: TemporaryDirectory, _ extra: [String]) async throws -> [String] {
        let result = try await CLI.run(["report", directory.path, "--format", "json"] + extra)
        try #require(result.status == 0, "\(result)")
        #expect(result.stderr.isEmpty, "\(result)")
        let summary = try JSONDecoder().decode(StallSummary.self, from: Data(result.stdout.utf8))
        let ids = summary.groups.flatMap(\.reportIds)
        #expect(summary.stalls == ids.count, "every selected stall is in a group: \(result)")
        return ids.sorted()
    }

    @Test("ISO 8601 bounds: --since is inclusive, --until exclusive; date-only and fractional forms",
          arguments: [
              (["--since", "2026-03-02"], ["r3", "r4", "r5"]),
              (["--since", "2026-03-03T00:00:00Z"], ["r4", "r5"]),
              (["--since", "2026-03-01T10:00:00.000Z"], ["r2", "r3", "r4", "r5"]),
              (["--since", "2026-03-01T10:00:00.001Z"], ["r3", "r4", "r5"]),
              (["--until", "2026-03-03T00:00:00Z"], ["r1", "r2", "r3"]),
              (["--until", "2026-03-01T10:00:00.000Z"], ["r1"]),
              (["--until", "2026-03-02"], ["r1", "r2"]),
              (["--since", "2026-03-01T09:00:00Z", "--until", "2026-03-03T00:00:00Z"], ["r2", "r3"]),
              (["--since", "2026-03-04T12:00:00.500Z"], ["r5"]),
              (["--since", "2026-03-02T11:30:00+02:00"], ["r3", "r4", "r5"]),
              (["--until", "2026-03-02T11:30:00+02:00"], ["r1", "r2"]),
              (["--since", "2026-03-05"], []),
              (["--until", "2026-03-01"], []),
          ])
    func isoBounds(arguments: [String], expected: [String]) async throws {
        try await withTemporaryDirectory { directory in
            try Self.writeFixed(in: directory)
            #expect(try await Self.selectedIds(directory, arguments) == expected, "\(arguments)")
        }
    }

    @Test("--loop selects one loop, alone and with a time bound",
          arguments: [
              (["--loop", "io"], ["r2", "r4"]),
              (["--loop", "main"], ["r1", "r3", "r5"]),
              (["--loop", "main", "--since", "2026-03-02"], ["r3", "r5"]),
              (["--loop", "io", "--until", "2026-03-02"], ["r2"]),
              (["--loop", "nope"], []),
          ])
    func loopFilter(arguments: [String], expected: [String]) async throws {
        try await withTemporaryDirectory { directory in
            try Self.writeFixed(in: directory)
            #expect(try await Self.selectedIds(directory, arguments) == expected, "\(arguments)")
        }
    }

    @Test("text output counts only the selected stalls")
    func textOutputFiltered() async throws {
        try await withTemporaryDirectory { directory in
            try Self.writeFixed(in: directory)
            let result = try await CLI.run(["report", directory.path, "--since", "2026-03-02", "--loop", "main"])
            #expect(result.status == 0, "\(result)")
            #expect(result.stdoutLines.first == "Stalls in \(directory.path): 2", "\(result)")
            #expect(result.stdout.contains("App.Step2.run()"), "\(result)")
            #expect(result.stdout.contains("App.Step4.run()"), "\(result)")
            #expect(!result.stdout.contains("App.Step0.run()"), "\(result)")
            #expect(!result.stdout.contains("App.Step3.run()"), "io loop left out: \(result)")

            let none = try await CLI.run(["report", directory.path, "--since", "2027-01-01"])
            #expect(none.status == 0, "an empty selection is no error: \(none)")
            #expect(none.stdout.contains("Stalls in \(directory.path): 0"), "\(none)")
            #expect(none.stdout.contains("No stalls recorded."), "\(none)")
        }
    }

    /// Reports started 30 minutes, 3 hours and 2 days before now.
    static func writeRecent(in directory: TemporaryDirectory) throws {
        let now = Date()
        let ages: [(String, TimeInterval)] = [("m30", 30 * 60), ("h3", 3 * 3600), ("d2", 2 * 86_400)]
        for (index, (id, age)) in ages.enumerated() {
            let report = GroupFixture.report(id: id, durationMs: 200, topSymbol: "App.Recent\(index).run()",
                                             start: GroupFixture.iso(now.addingTimeInterval(-age)))
            try Fixture.write(report, named: id, in: directory)
        }
    }

    @Test("relative ages count back from now",
          arguments: [
              (["--since", "2h"], ["m30"]),
              (["--since", "45m"], ["m30"]),
              (["--since", "1d"], ["h3", "m30"]),
              (["--since", "1w"], ["d2", "h3", "m30"]),
              (["--since", "90s"], []),
              (["--since", "10800s"], ["m30"]),
              (["--since", "1.5d"], ["h3", "m30"]),
              (["--until", "2h"], ["d2", "h3"]),
              (["--until", "1d"], ["d2"]),
              (["--until", "3d"], []),
              (["--since", "1d", "--until", "1h"], ["h3"]),
          ])
    func relativeAges(arguments: [String], expected: [String]) async throws {
        try await withTemporaryDirectory { directory in
            try Self.writeRecent(in: directory)
            #expect(try await Self.selectedIds(directory, arguments) == expected, "\(arguments)")
        }
    }

    @Test("invalid bounds: exit 64 naming the option and the value",
          arguments: [
              ("--since", "yesterday"),
              ("--until", "yesterday"),
              ("--since", "5x"),
              ("--until", "-2h"),
              ("--since", "2026-13-45"),
              ("--since", "h"),
          ])
    func invalidBound(option: String, value: String) async throws {
        try await withTemporaryDirectory { directory in
            try Self.writeFixed(in: directory)
            for format in ["text", "json"] {
                // `=` so that a value starting with '-' is not taken for an option.
                let result = try await CLI.run(["report", directory.path, "--format", format, "\(option)=\(value)"])
                #expect(result.status == 64, "\(result)")
                #expect(result.stdout.isEmpty, "\(result)")
                #expect(result.stderr.contains("\(option) \(value)"), "names the option and value: \(result)")
            }
        }
    }

    @Test("--folded and --html honour the selection")
    func exportsFiltered() async throws {
        try await withTemporaryDirectory { directory in
            try Self.writeFixed(in: directory)
            let out = try TemporaryDirectory("stallmon-filter-out")
            defer { out.remove() }
            let folded = out.path("stacks.folded")
            let result = try await CLI.run(["report", directory.path, "--loop", "io", "--folded", folded])
            #expect(result.status == 0, "\(result)")
            let text = try String(contentsOfFile: folded, encoding: .utf8)
            #expect(text.contains("App.Step1.run()"), "\(text)")
            #expect(text.contains("App.Step3.run()"), "\(text)")
            for excluded in ["App.Step0.run()", "App.Step2.run()", "App.Step4.run()"] {
                #expect(!text.contains(excluded), "\(excluded) is on loop main: \(text)")
            }
        }
    }
}
