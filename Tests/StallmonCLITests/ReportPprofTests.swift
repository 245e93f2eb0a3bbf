import Foundation
@testable import StallmonReport
import StallmonTestSupport
import Testing

/// `stallmon report --pprof FILE`, read by the real tools: `go tool pprof` (Debian's golang-go) and `protoc --decode`
/// with pprof's own profile.proto (scripts/protos/profile.proto).
@Suite("stallmon report --pprof")
struct ReportPprofTests {
    /// Three stalls of known stacks (`Fixture.report`: 1 of 4 usable samples `[top, caller, main]`, 3
    /// `[nanosleep, top, caller, main]`): Worker.step 400 ms (cpu, loop main) and 200 ms (cpu, loop other),
    /// Cache.evict 200 ms (blocked, loop main), and one outside `--since`.
    static func writeReports(in directory: TemporaryDirectory) throws {
        let stalls: [(top: String, ms: Double, loop: String, stallClass: StallClass, start: Int)] = [
            ("App.Worker.step()", 400, "main", .cpu, 1800),
            ("App.Worker.step()", 200, "other", .cpu, 1810),
            ("App.Cache.evict()", 200, "main", .blocked, 1820),
            ("App.Old.thing()", 5000, "main", .cpu, 0),
        ]
        for (index, stall) in stalls.enumerated() {
            var report = GroupFixture.report(id: "pp\(index)", durationMs: stall.ms, topSymbol: stall.top,
                                             start: Fixture.start(stall.start), loop: stall.loop,
                                             stallClass: stall.stallClass,
                                             signature: String(repeating: String(index), count: 16))
            if index == 0 {
                report.traceId = "4bf92f3577b34da6a3ce929d0e0e4736"
                report.spanId = "00f067aa0ba902b7"
            }
            try Fixture.write(report, named: "pp\(index)", in: directory)
        }
    }

    static func profile() async throws -> (directory: TemporaryDirectory, path: String) {
        let directory = try TemporaryDirectory()
        try writeReports(in: directory)
        let path = directory.path("stalls.pb.gz")
        let result = try await CLI.run(["report", directory.path, "--since", "2026-01-10T12:20:00Z", "--pprof", path])
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout.hasPrefix("Stalls in \(directory.path): 3"), "still prints the summary: \(result)")
        return (directory, path)
    }

    /// `go tool pprof -top -unit=ms`: rows `flat flat% sum% cum cum% name`, by name.
    static func top(_ path: String, _ extra: [String] = []) async throws -> [String: (flat: String, cum: String)] {
        let result = try await ExternalTool.run("go", ["tool", "pprof", "-top", "-unit=ms"] + extra + [path],
                                                timeout: .seconds(120))
        #expect(result.status == 0, "\(result)")
        var rows: [String: (flat: String, cum: String)] = [:]
        for line in result.stdout.split(separator: "\n") {
            let fields = line.split(separator: " ", maxSplits: 5, omittingEmptySubsequences: true)
            guard fields.count == 6, fields[1].hasSuffix("%") else { continue }
            rows[fields[5].trimmingCharacters(in: .whitespaces)] = (String(fields[0]), String(fields[3]))
        }
        return rows
    }

    @Test("go tool pprof -top: the stall functions, each with its share of the stall time")
    func goToolPprofTop() async throws {
        let (directory, path) = try await Self.profile()
        defer { directory.remove() }
        let bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(bytes.prefix(2) == Data([0x1f, 0x8b]), "gzipped, as pprof files are")
        let rows = try await Self.top(path)
        // By hand: each stall gives 3/4 of its time to the stack under nanosleep, 1/4 to its top function.
        #expect(rows[Fixture.leafSymbol]?.flat == "600ms", "\(rows)")
        #expect(rows["App.Worker.step()"]?.flat == "150ms" && rows["App.Worker.step()"]?.cum == "600ms", "\(rows)")
        #expect(rows["App.Cache.evict()"]?.flat == "50ms" && rows["App.Cache.evict()"]?.cum == "200ms", "\(rows)")
        #expect(rows[Fixture.callerSymbol]?.cum == "800ms", "\(rows)")
        #expect(rows["App.Old.thing()"] == nil && rows.count == 5, "--since left it out: \(rows)")
        let stalls = try await ExternalTool.run("go", ["tool", "pprof", "-top", "-sample_index=stalls", path],
                                                timeout: .seconds(120))
        #expect(stalls.stdout.contains("Total samples = 3"), "one count per stall: \(stalls)")
    }

    @Test("go tool pprof -tags and -traces: the labels users filter by, and the stacks with file lines")
    func goToolPprofLabels() async throws {
        let (directory, path) = try await Self.profile()
        defer { directory.remove() }
        let tags = try await ExternalTool.run("go", ["tool", "pprof", "-tags", "-unit=ms", path],
                                              timeout: .seconds(120))
        #expect(tags.status == 0, "\(tags)")
        for expected in ["loop: Total 800.0ms", "600.0ms (75.00%): main", "200.0ms (25.00%): other",
                         "class: Total 800.0ms", "600.0ms (75.00%): cpu", "200.0ms (25.00%): blocked",
                         "label: Total 800.0ms", "800.0ms (  100%): timer.tick", "signature: Total 800.0ms",
                         "400.0ms (50.00%): 0000000000000000", "build_id: Total 800.0ms", "800.0ms (  100%): abc123",
                         "span_id: Total 400.0ms", "400.0ms (  100%): 00f067aa0ba902b7"] {
            #expect(tags.stdout.contains(expected), "\(expected) in \(tags.stdout)")
        }
        #expect(!tags.stdout.contains("4bf92f3577b34da6a3ce929d0e0e4736"), "no trace id as a label")
        let traces = try await ExternalTool.run("go", ["tool", "pprof", "-traces", "-lines", path],
                                                timeout: .seconds(120))
        #expect(traces.status == 0, "\(traces)")
        #expect(traces.stdout.contains("App.Worker.step() /src/App/Worker.swift:42"), "\(traces.stdout)")
        #expect(traces.stdout.contains("App.Server.handle(request:) /src/App/Server.swift:17"), "\(traces.stdout)")
    }

    @Test("protoc --decode with pprof's own profile.proto reads the file")
    func officialProtoDecodes() async throws {
        let (directory, path) = try await Self.profile()
        defer { directory.remove() }
        let protos = PackageProductsTests.repository + "/scripts/protos"
        let decoded = try await ExternalTool.run("sh", ["-c", "gunzip -c '\(path)' | protoc "
            + "--decode=perftools.profiles.Profile -I '\(protos)' profile.proto"])
        #expect(decoded.status == 0, "\(decoded)")
        for expected in [#"string_table: "stall_time""#, #"string_table: "nanoseconds""#,
                         #"string_table: "App.Cache.evict()""#, "sample {", "location {", "has_inline_frames: true"] {
            #expect(decoded.stdout.contains(expected), "\(expected)")
        }
        #expect(decoded.stdout.components(separatedBy: "\nsample {").count - 1 == 6, "two stacks for each of 3 stalls")
    }

    @Test("an unwritable --pprof path: a clear error and exit status 1")
    func unwritablePath() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try Self.writeReports(in: directory)
        let result = try await CLI.run(["report", directory.path, "--pprof", "/nonexistent-dir/stalls.pb.gz"])
        #expect(result.status == 1, "\(result)")
        #expect(result.stderr.contains("cannot write /nonexistent-dir/stalls.pb.gz"), "\(result)")
    }
}
