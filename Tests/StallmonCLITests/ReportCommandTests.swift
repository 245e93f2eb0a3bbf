import Foundation
@testable import Stallmon
@testable import StallmonReport
import StallmonTestSupport
import Testing

/// `stallmon report DIR`: counts, nearest-rank percentiles and groups by top in-app frame, in JSON and text.
@Suite("stallmon report")
struct ReportCommandTests {
    /// Ten reports in four groups (one of them without an in-app frame), two loops, one ongoing. File names run
    /// opposite to start times, so the order of `reportIds` shows the reader sorts by start.
    struct Sample {
        struct Entry {
            var symbol: String?
            var duration: Double
            var loop: String
            var ongoing = false
        }

        static let entries: [Entry] = [
            Entry(symbol: "App.Config.parse()", duration: 150, loop: "main"),
            Entry(symbol: "App.Renderer.render()", duration: 2500, loop: "io"),
            Entry(symbol: "App.Config.parse()", duration: 900, loop: "main"),
            Entry(symbol: nil, duration: 110, loop: "main"),
            Entry(symbol: "App.Renderer.render()", duration: 130, loop: "io"),
            Entry(symbol: "App.Config.parse()", duration: 120, loop: "main"),
            Entry(symbol: "App.Log.flush()", duration: 1200, loop: "main", ongoing: true),
            Entry(symbol: nil, duration: 700, loop: "main"),
            Entry(symbol: "App.Renderer.render()", duration: 300, loop: "io"),
            Entry(symbol: "App.Config.parse()", duration: 480, loop: "main"),
        ]

        let directory: TemporaryDirectory
        /// id → path, and ids in start order.
        var paths: [String: String] = [:]
        var ids: [String] = []

        init() throws {
            directory = try TemporaryDirectory()
            for (index, entry) in Self.entries.enumerated() {
                let id = String(format: "%02d", index) + "-" + UUID().uuidString.lowercased()
                let report = Fixture.report(id: id, durationMs: entry.duration, topSymbol: entry.symbol,
                                            topLine: 40 + index, loop: entry.loop, start: Fixture.start(index),
                                            ongoing: entry.ongoing)
                paths[id] = try Fixture.write(report, named: String(format: "%02d", 99 - index), in: directory)
                ids.append(id)
            }
        }

        func ids(of symbol: String?) -> [String] {
            zip(Self.entries, ids).filter { $0.0.symbol == symbol }.map(\.1)
        }

        func durations(of symbol: String?) -> [Double] {
            Self.entries.filter { $0.symbol == symbol }.map(\.duration)
        }
    }

    @Test("--format json: counts, nearest-rank percentiles, groups most stalls first")
    func jsonSummary() async throws {
        let sample = try Sample()
        defer { sample.directory.remove() }
        let result = try await CLI.run(["report", sample.directory.path, "--format", "json"])
        #expect(result.status == 0, "\(result)")
        #expect(result.stderr.isEmpty, "\(result)")
        let summary = try JSONDecoder().decode(StallSummary.self, from: Data(result.stdout.utf8))

        let all = Sample.entries.map(\.duration)
        #expect(summary.schema == "stallmon.summary/1")
        #expect(summary.directory == sample.directory.path)
        #expect(summary.stalls == 10)
        #expect(summary.ongoing == 1)
        #expect(summary.unreadable == 0)
        #expect(summary.loops == ["io", "main"])
        #expect(summary.firstStart == Fixture.start(0))
        #expect(summary.lastStart == Fixture.start(9))
        let durations = try #require(summary.durationMs)
        // Sorted: 110 120 130 150 300 480 700 900 1200 2500 → ranks 5, 9, 10.
        #expect(durations.p50 == 300)
        #expect(durations.p90 == 1200)
        #expect(durations.p99 == 2500)
        #expect(durations.p50 == Fixture.nearestRank(all, percent: 50))
        #expect(durations.p90 == Fixture.nearestRank(all, percent: 90))
        #expect(durations.p99 == Fixture.nearestRank(all, percent: 99))
        #expect(durations.max == 2500)
        #expect(durations.total == all.reduce(0, +))

        #expect(summary.groups.map(\.topFrame)
            == ["App.Config.parse()", "App.Renderer.render()", StallSummary.noInAppFrame, "App.Log.flush()"])
        #expect(summary.groups.map(\.count) == [4, 3, 2, 1])
        for group in summary.groups {
            let symbol: String? = group.topFrame == StallSummary.noInAppFrame ? nil : group.topFrame
            let durations = sample.durations(of: symbol)
            #expect(group.totalMs == durations.reduce(0, +), "\(group.topFrame)")
            #expect(group.maxMs == durations.max(), "\(group.topFrame)")
            #expect(group.p50Ms == Fixture.nearestRank(durations, percent: 50), "\(group.topFrame)")
            #expect(group.reportIds == sample.ids(of: symbol), "oldest first: \(group.topFrame)")
            let longest = zip(Sample.entries, sample.ids).filter { $0.0.symbol == symbol }
                .max { $0.0.duration < $1.0.duration }!.1
            #expect(group.example == sample.paths[longest], "\(group.topFrame)")
        }
        let parse = summary.groups[0]
        #expect(parse.loops == ["main"])
        #expect(parse.file == "/src/App/Worker.swift")
        #expect(parse.line == 42)  // the longest member's line (the group's `example`)
        #expect(summary.groups[1].loops == ["io"])
        let noFrame = summary.groups[2]
        #expect(noFrame.file == nil)
        #expect(noFrame.line == nil)
    }

    @Test("text format: header, percentiles and one row per group in order")
    func textSummary() async throws {
        let sample = try Sample()
        defer { sample.directory.remove() }
        let result = try await CLI.run(["report", sample.directory.path])
        #expect(result.status == 0, "\(result)")
        #expect(result.stderr.isEmpty, "\(result)")
        let lines = result.stdoutLines
        #expect(lines.first == "Stalls in \(sample.directory.path): 10 (1 still ongoing when last written)")
        #expect(lines.contains("From \(Fixture.start(0)) to \(Fixture.start(9))"))
        #expect(lines.contains("Loops: io, main"))
        #expect(lines.contains("Duration: p50 300.0 ms  p90 1.20 s  p99 2.50 s  max 2.50 s  total 6.59 s"),
                "\(result)")
        let header = try #require(lines.firstIndex { $0.contains("TOP IN-APP FRAME") }, "\(result)")
        #expect(lines[header].split(separator: " ", omittingEmptySubsequences: true).first == "COUNT")
        let rows = Array(lines[(header + 1)...])
        #expect(rows.count == 4, "\(result)")
        let expected: [(count: String, total: String, max: String, frame: String)] = [
            ("4", "1.65 s", "900.0 ms", "App.Config.parse()  (Worker.swift:42)"),
            ("3", "2.93 s", "2.50 s", "App.Renderer.render()  (Worker.swift:41)"),
            ("2", "810.0 ms", "700.0 ms", StallSummary.noInAppFrame),
            ("1", "1.20 s", "1.20 s", "App.Log.flush()  (Worker.swift:46)"),
        ]
        for (row, want) in zip(rows, expected) {
            #expect(row.hasSuffix(want.frame), "\(row)")
            #expect(row.split(separator: " ").first.map(String.init) == want.count, "\(row)")
            #expect(row.contains(want.total), "\(row)")
            #expect(row.contains(want.max), "\(row)")
        }
    }

    @Test("--top N keeps the N largest groups and all the counts")
    func topLimitsGroups() async throws {
        let sample = try Sample()
        defer { sample.directory.remove() }
        let result = try await CLI.run(["report", sample.directory.path, "--format", "json", "--top", "2"])
        #expect(result.status == 0, "\(result)")
        let summary = try JSONDecoder().decode(StallSummary.self, from: Data(result.stdout.utf8))
        #expect(summary.stalls == 10)
        #expect(summary.groups.map(\.topFrame) == ["App.Config.parse()", "App.Renderer.render()"])

        let text = try await CLI.run(["report", sample.directory.path, "--top", "1"])
        #expect(text.status == 0, "\(text)")
        #expect(text.stdout.contains("App.Config.parse()"))
        #expect(!text.stdout.contains("App.Renderer.render()"), "\(text)")
    }

    @Test("groups with as many stalls are ordered by total time")
    func tieBreakByTotal() async throws {
        try await withTemporaryDirectory { directory in
            try Fixture.write(Fixture.report(durationMs: 100, topSymbol: "A.small()", start: Fixture.start(0)),
                              named: "a1", in: directory)
            try Fixture.write(Fixture.report(durationMs: 100, topSymbol: "A.small()", start: Fixture.start(1)),
                              named: "a2", in: directory)
            try Fixture.write(Fixture.report(durationMs: 300, topSymbol: "B.large()", start: Fixture.start(2)),
                              named: "b1", in: directory)
            try Fixture.write(Fixture.report(durationMs: 50, topSymbol: "B.large()", start: Fixture.start(3)),
                              named: "b2", in: directory)
            try Fixture.write(Fixture.report(durationMs: 999, topSymbol: "C.once()", start: Fixture.start(4)),
                              named: "c1", in: directory)
            let result = try await CLI.run(["report", directory.path, "--format", "json"])
            #expect(result.status == 0, "\(result)")
            let summary = try JSONDecoder().decode(StallSummary.self, from: Data(result.stdout.utf8))
            #expect(summary.groups.map(\.topFrame) == ["B.large()", "A.small()", "C.once()"])
            #expect(summary.groups.map(\.count) == [2, 2, 1])
            #expect(summary.groups[0].p50Ms == 50)
            #expect(summary.groups[0].example == directory.path("stall-b1.json"))
        }
    }

    @Test("a single report: every percentile is its duration")
    func singleReport() async throws {
        try await withTemporaryDirectory { directory in
            try Fixture.write(Fixture.report(durationMs: 123.4, topSymbol: "Only.one()"), named: "x", in: directory)
            let result = try await CLI.run(["report", directory.path + "/", "--format", "json"])
            #expect(result.status == 0, "\(result)")
            let summary = try JSONDecoder().decode(StallSummary.self, from: Data(result.stdout.utf8))
            #expect(summary.stalls == 1)
            #expect(summary.durationMs == .init(p50: 123.4, p90: 123.4, p99: 123.4, max: 123.4, total: 123.4))
            #expect(summary.groups.first?.example == directory.path("stall-x.json"))
        }
    }

    @Test("the directory comes from report_dir of --config, or STALLMON_REPORT_DIR")
    func directoryFromConfiguration() async throws {
        try await withTemporaryDirectory { directory in
            let reports = directory.path("reports")
            try FileManager.default.createDirectory(atPath: reports, withIntermediateDirectories: false)
            try Fixture.report(durationMs: 250, topSymbol: "Configured.dir()").jsonData()
                .write(to: URL(fileURLWithPath: reports + "/stall-1.json"))
            let config = try directory.write("stallmon.conf", "# test\nreport_dir = \"\(reports)\"\n")

            let fromFile = try await CLI.run(["report", "--config", config, "--format", "json"])
            #expect(fromFile.status == 0, "\(fromFile)")
            let summary = try JSONDecoder().decode(StallSummary.self, from: Data(fromFile.stdout.utf8))
            #expect(summary.directory == reports)
            #expect(summary.groups.map(\.topFrame) == ["Configured.dir()"])

            let fromEnvironment = try await CLI.run(["report"], environment: ["STALLMON_REPORT_DIR": reports])
            #expect(fromEnvironment.status == 0, "\(fromEnvironment)")
            #expect(fromEnvironment.stdout.contains("Configured.dir()"), "\(fromEnvironment)")

            let fromConfigVariable = try await CLI.run(["report"], environment: ["STALLMON_CONFIG": config])
            #expect(fromConfigVariable.status == 0, "\(fromConfigVariable)")
            #expect(fromConfigVariable.stdout.hasPrefix("Stalls in \(reports): 1"), "\(fromConfigVariable)")
        }
    }
}

/// `stallmon report` on directories that hold broken files, nothing, or do not exist.
@Suite("stallmon report: bad input")
struct ReportBadInputTests {
    /// Writes the four kinds of bad file; returns their names and the reason each warning must give.
    static func writeBadFiles(in directory: TemporaryDirectory) throws -> [(name: String, reason: String)] {
        let good = try Fixture.encode(Fixture.report(durationMs: 180, topSymbol: "Good.one()"))
        try directory.write("stall-empty.json", Data())
        try directory.write("stall-truncated.json", good.prefix(good.count / 2))
        try directory.write("stall-foreign.json", #"{"foo":1}"#)
        let future = String(decoding: good, as: UTF8.self)
            .replacingOccurrences(of: "\"stallmon.report/1\"", with: "\"stallmon.report/9\"")
        #expect(future.contains("stallmon.report/9"))
        try directory.write("stall-future.json", future)
        return [
            ("stall-empty.json", "empty file"),
            ("stall-truncated.json", "not valid JSON"),
            ("stall-foreign.json", "not a stallmon report"),
            ("stall-future.json", "newer stallmon"),
        ]
    }

    @Test("bad files are skipped with one warning each; good ones are summarized")
    func mixedDirectory() async throws {
        try await withTemporaryDirectory { directory in
            let bad = try Self.writeBadFiles(in: directory)
            try Fixture.write(Fixture.report(durationMs: 200, topSymbol: "Good.one()", start: Fixture.start(1)),
                              named: "good-1", in: directory)
            try Fixture.write(Fixture.report(durationMs: 400, topSymbol: "Good.two()", start: Fixture.start(2)),
                              named: "good-2", in: directory)
            // A write in progress, and files not named like reports: not reports, not problems.
            try directory.write(".tmp-stall-20260110T120000.000Z-deadbeef.json", "{\"schema\":")
            try directory.write(".tmp-stall-x.json-123-456", "")
            try directory.write("notes.txt", "garbage")
            try directory.write("events.jsonl", "{\"event\":\"stall.begin\"}\n")

            let result = try await CLI.run(["report", directory.path, "--format", "json"])
            #expect(result.status == 0, "\(result)")
            let summary = try JSONDecoder().decode(StallSummary.self, from: Data(result.stdout.utf8))
            #expect(summary.stalls == 2)
            #expect(summary.unreadable == 4)
            #expect(Set(summary.groups.map(\.topFrame)) == ["Good.one()", "Good.two()"])

            let warnings = result.stderrLines
            #expect(warnings.count == 4, "one line per bad file: \(result)")
            for (name, reason) in bad {
                let matching = warnings.filter { $0.contains(directory.path(name)) }
                #expect(matching.count == 1, "\(name): \(result)")
                #expect(matching.first?.contains(reason) == true, "\(name) should say \(reason): \(result)")
            }
            #expect(!result.stderr.contains(".tmp-"), "\(result)")
            #expect(!result.stderr.contains("notes.txt"), "\(result)")
            #expect(!result.stderr.contains("events.jsonl"), "\(result)")

            let text = try await CLI.run(["report", directory.path])
            #expect(text.status == 0, "\(text)")
            #expect(text.stdout.hasPrefix("Stalls in \(directory.path): 2, 4 unreadable file(s) skipped\n"), "\(text)")
            #expect(text.stderrLines.count == 4, "\(text)")
        }
    }

    @Test("a directory of nothing but bad files exits 1")
    func onlyBadFiles() async throws {
        try await withTemporaryDirectory { directory in
            _ = try Self.writeBadFiles(in: directory)
            let result = try await CLI.run(["report", directory.path, "--format", "json"])
            #expect(result.status == 1, "\(result)")
            #expect(result.stderrLines.count == 4, "\(result)")
            let summary = try JSONDecoder().decode(StallSummary.self, from: Data(result.stdout.utf8))
            #expect(summary.stalls == 0)
            #expect(summary.unreadable == 4)

            let text = try await CLI.run(["report", directory.path])
            #expect(text.status == 1, "\(text)")
        }
    }

    @Test("a missing directory exits 1 and says so")
    func missingDirectory() async throws {
        try await withTemporaryDirectory { directory in
            let missing = directory.path("does-not-exist")
            let result = try await CLI.run(["report", missing])
            #expect(result.status == 1, "\(result)")
            #expect(result.stdout.isEmpty, "\(result)")
            #expect(result.stderr.contains(missing), "\(result)")
            #expect(result.stderr.contains("no such directory"), "\(result)")
        }
    }

    @Test("a file where the directory should be exits 1")
    func notADirectory() async throws {
        try await withTemporaryDirectory { directory in
            let file = try directory.write("plain-file", "x")
            let result = try await CLI.run(["report", file])
            #expect(result.status == 1, "\(result)")
            #expect(result.stderr.contains("not a directory"), "\(result)")
        }
    }

    @Test("an empty directory exits 0 with \"No stalls recorded\"")
    func emptyDirectory() async throws {
        try await withTemporaryDirectory { directory in
            let result = try await CLI.run(["report", directory.path])
            #expect(result.status == 0, "\(result)")
            #expect(result.stderr.isEmpty, "\(result)")
            #expect(result.stdout == "Stalls in \(directory.path): 0\nNo stalls recorded.\n", "\(result)")

            let json = try await CLI.run(["report", directory.path, "--format", "json"])
            #expect(json.status == 0, "\(json)")
            let summary = try JSONDecoder().decode(StallSummary.self, from: Data(json.stdout.utf8))
            #expect(summary.stalls == 0)
            #expect(summary.unreadable == 0)
            #expect(summary.durationMs == nil)
            #expect(summary.groups.isEmpty)
            #expect(summary.loops.isEmpty)
        }
    }

    @Test("only temporary files of writes in progress: nothing to report, nothing to warn about")
    func onlyTemporaryFiles() async throws {
        try await withTemporaryDirectory { directory in
            try directory.write(".tmp-stall-20260110T120000.000Z-deadbeef.json", "{\"sch")
            let result = try await CLI.run(["report", directory.path])
            #expect(result.status == 0, "\(result)")
            #expect(result.stderr.isEmpty, "\(result)")
            #expect(result.stdout.contains("No stalls recorded"), "\(result)")
        }
    }
}

extension StallReport {
    func jsonData() throws -> Data { try Fixture.encode(self) }
}
