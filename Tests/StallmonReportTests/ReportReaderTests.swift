import Foundation
import Testing
@testable import StallmonReport
import StallmonTestSupport

/// `ReportReader`, in process: what it accepts, what it refuses and why, and directory scans.
@Suite("ReportReader")
struct ReportReaderTests {
    static func reason(_ data: Data) -> String? {
        do {
            _ = try ReportReader.decode(data, path: "x.json")
            return nil
        } catch {
            #expect(error.path == "x.json")
            #expect(error.description == "x.json: \(error.reason)")
            return error.reason
        }
    }

    static func goodJSON() throws -> String {
        String(decoding: try Fixture.encode(Fixture.report(durationMs: 150, topSymbol: "A.a()")), as: UTF8.self)
    }

    @Test("a FIFO, a device or a directory is named for what it is, without blocking or reading forever")
    func notRegularFilesAreNamed() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let fifo = directory.path("stall-fifo.json")
        #expect(mkfifo(fifo, 0o600) == 0)
        for (path, expected) in [(fifo, "a FIFO"), ("/dev/zero", "a character device"),
                                 (directory.path, "is a directory"), (directory.path("none.json"), "no such file")] {
            #expect(throws: ReportReadError.self) { _ = try ReportReader.read(path) }
            do {
                _ = try ReportReader.readDigest(path)
                Issue.record("\(path) was read")
            } catch {
                #expect(error.reason.contains(expected), "\(path): \(error.reason)")
                #expect(!error.reason.contains("permission"), "\(path): \(error.reason)")
            }
        }
    }

    @Test("a complete report decodes to what was written")
    func roundTrip() throws {
        let report = Fixture.report(durationMs: 321.5, topSymbol: "App.Worker.crunch()")
        #expect(try ReportReader.decode(Fixture.encode(report), path: "r.json") == report)
        var noTop = Fixture.report(durationMs: 101, topSymbol: nil, ongoing: true)
        noTop.captures.pauseMedianUs = nil
        #expect(try ReportReader.decode(Fixture.encode(noTop), path: "r.json") == noTop)
    }

    @Test("the documented field names decode (stallmon.report/1)")
    func documentedSchema() throws {
        let json = """
            {"schema": "stallmon.report/1", "id": "0b5e9a0c-2f7e-4f59-9d0e-5f3c1f7b8a11", "ongoing": false,
             "process": {"pid": 12, "executable": "/usr/bin/app", "buildId": "ab12", "hostname": "h"},
             "thread": {"tid": 13, "name": "main"}, "loop": "main", "thresholdMs": 100,
             "start": {"wall": "2026-01-10T12:00:00.000Z", "monotonicNs": 5},
             "durationMs": 150.5, "durationSource": "loop", "label": "timer",
             "topFrame": {"symbol": "App.run()", "module": "/usr/bin/app", "file": "/src/App.swift", "line": 9},
             "captures": {"attempted": 2, "succeeded": 1, "timedOut": 1, "pauseMedianUs": 20, "pauseMaxUs": 30},
             "samples": [{"offsetMs": 100, "status": "ok", "frames": [0], "truncated": false, "label": "timer"},
                         {"offsetMs": 110, "status": "timed-out", "frames": [], "truncated": false}],
             "frames": [{"address": "0x1000", "image": 0, "module": "/usr/bin/app", "buildId": "ab12",
                         "offset": "0x1000", "symbol": "App.run()", "symbolOffset": 4, "file": "/src/App.swift",
                         "line": 9, "inApp": true}],
             "images": [{"path": "/usr/bin/app", "buildId": "ab12", "loadBias": "0x0", "start": "0x0",
                         "end": "0x2000"}],
             "someFieldAddedLater": {"ignored": true}}
            """
        let report = try ReportReader.decode(Data(json.utf8), path: "doc.json")
        #expect(report.topFrame?.displayName == "App.run() (App.swift:9)")
        #expect(report.samples.map(\.status) == [.ok, .timedOut])
        #expect(report.captures.timedOut == 1)
        #expect(report.frames.first?.inApp == true)
    }

    @Test("what is refused, and the reason given")
    func refusals() throws {
        let good = try Self.goodJSON()
        #expect(Self.reason(Data()) == "empty file")
        #expect(Self.reason(Data(good.utf8.prefix(100))) == "not valid JSON (truncated or corrupt)")
        #expect(Self.reason(Data("hello".utf8)) == "not valid JSON (truncated or corrupt)")
        #expect(Self.reason(Data(#"{"foo":1}"#.utf8)) == #"not a stallmon report (no "schema" field)"#)
        #expect(Self.reason(Data(#"{"schema":"other.tool/1"}"#.utf8))
            == #"not a stallmon report (schema "other.tool/1")"#)
        #expect(Self.reason(Data(#"{"schema":"stallmon.summary/1"}"#.utf8))?.hasPrefix("not a stallmon report") == true)
        #expect(Self.reason(Data(#"{"schema":"stallmon.report/x"}"#.utf8))?.hasPrefix("not a stallmon report") == true)
        let future = good.replacingOccurrences(of: "stallmon.report/1", with: "stallmon.report/9")
        #expect(Self.reason(Data(future.utf8))
            == "written by a newer stallmon (schema stallmon.report/9); this build reads stallmon.report/1")
        let missing = good.replacingOccurrences(of: "\"durationMs\"", with: "\"renamedField\"")
        #expect(Self.reason(Data(missing.utf8)) == #"incomplete report: missing "durationMs""#)
        let wrongType = good.replacingOccurrences(of: "\"durationSource\" : \"loop\"", with: "\"durationSource\" : 7")
        #expect(wrongType != good)
        #expect(Self.reason(Data(wrongType.utf8))?.hasPrefix("malformed report") == true)
    }

    @Test("read: missing file, directory")
    func readErrors() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        #expect(throws: ReportReadError(path: directory.path("none.json"), reason: "no such file")) {
            try ReportReader.read(directory.path("none.json"))
        }
        #expect(throws: ReportReadError(path: directory.path, reason: "is a directory")) {
            try ReportReader.read(directory.path)
        }
    }

    @Test("scan: only stall-*.json, sorted by start, problems listed per file")
    func scan() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        // Names sort opposite to starts.
        try Fixture.write(Fixture.report(id: "late", durationMs: 200, topSymbol: "A.a()", start: Fixture.start(9)),
                          named: "a", in: directory)
        try Fixture.write(Fixture.report(id: "early", durationMs: 300, topSymbol: "B.b()", start: Fixture.start(1)),
                          named: "b", in: directory)
        try directory.write("stall-c.json", "")
        try directory.write(".tmp-stall-d.json", "")
        try directory.write(".tmp-stall-e.json-1-2", "")
        try directory.write("stall-f.json.bak", "")
        try directory.write("report-g.json", "")
        try directory.write("events.jsonl", "")

        let scan = try ReportReader.scan(directory: directory.path)
        #expect(scan.reports.map(\.report.id) == ["early", "late"])
        #expect(scan.reports.map(\.path) == [directory.path("stall-b.json"), directory.path("stall-a.json")])
        #expect(scan.problems == [ReportReadError(path: directory.path("stall-c.json"), reason: "empty file")])

        let slashed = try ReportReader.scan(directory: directory.path + "/")
        #expect(slashed.reports.map(\.path) == scan.reports.map(\.path))
    }

    @Test("fold: every report once, partials merged in file order across runs and windows, problems per file")
    func fold() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        for index in 0..<45 {
            try Fixture.write(Fixture.report(id: "r\(index)", durationMs: 100, topSymbol: "A.a()",
                                             start: Fixture.start(45 - index)),
                              named: String(format: "%03d", index), in: directory)
        }
        try directory.write("stall-017x.json", "{")
        try directory.write("stall-044x.json", "")
        try directory.write(".tmp-stall-050.json", "")
        var runs: [[String]] = []
        let problems = try ReportReader.fold(in: directory.path, chunk: 4, window: 3, partial: { [String]() },
                                             add: { (ids: inout [String], index, _, digest: StallDigest) in
                                                 ids.append("\(digest.id)@\(index)")
                                             }, merge: { runs.append($0) })
        // The indices count every file: stall-017x.json comes after stall-017.json, stall-044x.json last.
        let indices = Array(0..<18) + Array(19..<46)
        #expect(runs.flatMap { $0 } == zip(0..<45, indices).map { "r\($0)@\($1)" }, "name order, each once")
        #expect(runs.count == 12, "47 files in runs of 4")
        #expect(problems.map(\.path) == [directory.path("stall-017x.json"), directory.path("stall-044x.json")])
        #expect(throws: ReportReadError.self) {
            try ReportReader.fold(in: directory.path("missing"), partial: { 0 }, add: { (_: inout Int, _, _, _: StallDigest) in },
                                  merge: { _ in })
        }
    }

    @Test("scan: a missing directory or a file throws")
    func scanErrors() throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let missing = directory.path("missing")
        #expect(throws: ReportReadError(path: missing, reason: "no such directory")) {
            try ReportReader.scan(directory: missing)
        }
        let file = try directory.write("file", "x")
        #expect(throws: ReportReadError(path: file, reason: "not a directory")) {
            try ReportReader.scan(directory: file)
        }
        #expect(try ReportReader.scan(directory: directory.path).reports.isEmpty)
    }
}
