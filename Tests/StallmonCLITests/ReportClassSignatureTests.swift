import Foundation
@testable import Stallmon
@testable import StallmonReport
import StallmonTestSupport
import Testing

/// `stallmon report` on reports that carry `class`, `signature` and `suppressedBefore`: grouping by signature,
/// the CLASS and SIG columns, the histogram, and the same in JSON.
@Suite("stallmon report: classes, signatures, histogram")
struct ReportClassSignatureTests {
    static let sigA = "a1b2c3d4e5f60718"
    static let sigB = "0f1e2d3c4b5a6978"
    static let sigC = "c0c0c0c0c0c0c0c0"

    struct Entry {
        var duration: Double
        var symbol: String
        var stallClass: StallClass?
        var signature: String?
        var suppressed: Int?
    }

    /// Group A: 4 stalls of sigA, mostly cpu, 2+1 suppressed before. Group B: 2 stalls of sigB whose top frames
    /// differ (still one group; the longest names it). Group C: sigC with the same top frame as group A (another
    /// group). Group D: an old-style report without class or signature.
    static let entries: [Entry] = [
        Entry(duration: 150, symbol: "App.Primes.crunch()", stallClass: .cpu, signature: sigA, suppressed: nil),
        Entry(duration: 180, symbol: "App.Primes.crunch()", stallClass: .cpu, signature: sigA, suppressed: 2),
        Entry(duration: 250, symbol: "App.Primes.crunch()", stallClass: .blocked, signature: sigA, suppressed: 0),
        Entry(duration: 600, symbol: "App.Primes.crunch()", stallClass: .cpu, signature: sigA, suppressed: 1),
        Entry(duration: 1200, symbol: "App.Disk.read()", stallClass: .blocked, signature: sigB, suppressed: nil),
        Entry(duration: 2500, symbol: "App.Disk.readAll()", stallClass: .blocked, signature: sigB, suppressed: nil),
        Entry(duration: 90, symbol: "App.Primes.crunch()", stallClass: .starved, signature: sigC, suppressed: nil),
        Entry(duration: 12000, symbol: "App.Legacy.run()", stallClass: nil, signature: nil, suppressed: nil),
    ]

    static func write(in directory: TemporaryDirectory) throws -> [String] {
        var ids: [String] = []
        for (index, entry) in entries.enumerated() {
            let id = "e\(index)"
            let report = GroupFixture.report(id: id, durationMs: entry.duration, topSymbol: entry.symbol,
                                             start: Fixture.start(index), stallClass: entry.stallClass,
                                             signature: entry.signature, suppressedBefore: entry.suppressed)
            try Fixture.write(report, named: id, in: directory)
            ids.append(id)
        }
        return ids
    }

    /// Bucket edges of the summary and the counts of `entries` in them, computed here by hand.
    static let expectedHistogram: [(lower: Double, upper: Double?, count: Int)] = [
        (0, 100, 1), (100, 200, 2), (200, 500, 1), (500, 1000, 1), (1000, 2000, 1), (2000, 5000, 1),
        (5000, 10000, 0), (10000, nil, 1),
    ]

    @Test("JSON: groups by signature with class and suppressed, class counts, histogram buckets")
    func json() async throws {
        try await withTemporaryDirectory { directory in
            _ = try Self.write(in: directory)
            let result = try await CLI.run(["report", directory.path, "--format", "json"])
            try #require(result.status == 0, "\(result)")
            #expect(result.stderr.isEmpty, "\(result)")

            // The raw object: the documented key names.
            let object = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8))
                as? [String: Any])
            let rawGroups = try #require(object["groups"] as? [[String: Any]])
            #expect(rawGroups.count == 4, "\(result)")
            let bySignature = Dictionary(uniqueKeysWithValues: rawGroups.compactMap { group in
                (group["signature"] as? String).map { ($0, group) }
            })
            #expect(Set(bySignature.keys) == [Self.sigA, Self.sigB, Self.sigC], "\(result)")
            #expect(bySignature[Self.sigA]?["class"] as? String == "cpu")
            #expect(bySignature[Self.sigA]?["suppressed"] as? Int == 3)
            #expect(bySignature[Self.sigB]?["class"] as? String == "blocked")
            #expect(bySignature[Self.sigB]?["suppressed"] as? Int == 0)
            #expect(bySignature[Self.sigC]?["class"] as? String == "starved")
            let unsigned = try #require(rawGroups.first { $0["signature"] == nil }, "\(result)")
            #expect(unsigned["class"] == nil, "no class when no report has one: \(unsigned)")
            #expect(unsigned["suppressed"] as? Int == 0)
            #expect(unsigned["topFrame"] as? String == "App.Legacy.run()")
            #expect(object["classes"] as? [String: Int] == ["cpu": 3, "blocked": 3, "starved": 1, "unknown": 1],
                    "\(result)")
            #expect(object["suppressed"] as? Int == 3)

            // The typed form.
            let summary = try JSONDecoder().decode(StallSummary.self, from: Data(result.stdout.utf8))
            #expect(summary.stalls == Self.entries.count)
            #expect(summary.groups.map(\.signature) == [Self.sigA, Self.sigB, nil, Self.sigC],
                    "most stalls first, then most total time: \(result)")
            #expect(summary.groups.map(\.count) == [4, 2, 1, 1])
            #expect(summary.groups.map(\.topFrame)
                == ["App.Primes.crunch()", "App.Disk.readAll()", "App.Legacy.run()", "App.Primes.crunch()"])
            #expect(summary.groups[0].reportIds.sorted() == ["e0", "e1", "e2", "e3"])
            #expect(summary.groups[1].reportIds.sorted() == ["e4", "e5"])
            #expect(summary.groups[0].totalMs == 1180)
            #expect(summary.groups[0].maxMs == 600)

            #expect(summary.histogram.count == Self.expectedHistogram.count, "\(summary.histogram)")
            for (bucket, expected) in zip(summary.histogram, Self.expectedHistogram) {
                #expect(bucket.lowerMs == expected.lower && bucket.upperMs == expected.upper
                    && bucket.count == expected.count, "\(bucket) vs \(expected)")
            }
            #expect(summary.histogram.map(\.count).reduce(0, +) == Self.entries.count)
        }
    }

    @Test("text: histogram lines and the CLASS and SIG columns; count+suppressed")
    func text() async throws {
        try await withTemporaryDirectory { directory in
            _ = try Self.write(in: directory)
            let result = try await CLI.run(["report", directory.path])
            try #require(result.status == 0, "\(result)")
            #expect(result.stderr.isEmpty, "\(result)")
            let lines = result.stdout.components(separatedBy: "\n")

            // Classes line.
            let classes = try #require(lines.first { $0.hasPrefix("Classes: ") }, "\(result)")
            for part in ["cpu 3", "blocked 3", "starved 1", "unknown 1"] {
                #expect(classes.contains(part), "\(classes)")
            }
            #expect(lines.contains { $0.contains("3 more without a report (rate limit)") }, "\(result)")

            // Histogram: one line per bucket from the first to the last used, count at the end, bars scaled to
            // the widest bucket (40 blocks).
            let labels = ["0 ms–100 ms", "100 ms–200 ms", "200 ms–500 ms", "500 ms–1 s", "1 s–2 s", "2 s–5 s",
                          "5 s–10 s", "≥ 10 s"]
            let widest = Self.expectedHistogram.map(\.count).max()!
            var previous = -1
            for (label, expected) in zip(labels, Self.expectedHistogram) {
                let index = try #require(lines.firstIndex { $0.hasPrefix(label + " ") }, "no line for \(label): \(result)")
                let line = lines[index]
                #expect(index == previous + 1 || previous == -1, "buckets in order, adjacent: \(result)")
                previous = index
                #expect(line.hasSuffix(" \(expected.count)"), "\(line)")
                let bar = line.filter { $0 == "█" }.count
                let expectedBar = expected.count == 0 ? 0 : max(1, expected.count * 40 / widest)
                #expect(bar == expectedBar, "\(line)")
            }

            // Table: columns found by the header's positions.
            let headerIndex = try #require(lines.firstIndex { $0.hasPrefix("COUNT") || $0.contains(" COUNT  ") },
                                           "\(result)")
            let header = lines[headerIndex]
            let columns = ["COUNT", "TOTAL", "P50", "MAX", "CLASS", "SIG", "TOP IN-APP FRAME"]
            let starts = try columns.map { name in
                try #require(header.range(of: name)).lowerBound
            }
            #expect(starts == starts.sorted(), "\(header)")
            let rows = lines[(headerIndex + 1)...].filter { !$0.isEmpty }
            #expect(rows.count == 4, "\(result)")
            func cell(_ row: String, _ column: String) -> String {
                let offset = header.distance(from: header.startIndex, to: header.range(of: column)!.lowerBound)
                let chars = Array(row)
                guard offset < chars.count else { return "" }
                let rest = String(chars[offset...])
                if column == "TOP IN-APP FRAME" { return rest }
                return String(rest.prefix { $0 != " " })
            }
            func row(signature: String) -> String? { rows.first { cell($0, "SIG") == signature } }
            let a = try #require(row(signature: String(Self.sigA.prefix(8))), "\(result)")
            #expect(cell(a, "CLASS") == "cpu", "\(a)")
            #expect(cell(a, "TOP IN-APP FRAME").hasPrefix("App.Primes.crunch()  (Worker.swift:42)"), "\(a)")
            #expect(a.trimmingCharacters(in: .whitespaces).hasPrefix("4+3 "), "count+suppressed: \(a)")
            let b = try #require(row(signature: String(Self.sigB.prefix(8))), "\(result)")
            #expect(cell(b, "CLASS") == "blocked", "\(b)")
            #expect(cell(b, "TOP IN-APP FRAME").hasPrefix("App.Disk.readAll()"), "\(b)")
            #expect(b.trimmingCharacters(in: .whitespaces).hasPrefix("2 "), "no suppressed, plain count: \(b)")
            let c = try #require(row(signature: String(Self.sigC.prefix(8))), "\(result)")
            #expect(cell(c, "CLASS") == "starved", "\(c)")
            #expect(cell(c, "TOP IN-APP FRAME").hasPrefix("App.Primes.crunch()"), "\(c)")
            let d = try #require(row(signature: "-"), "\(result)")
            #expect(cell(d, "CLASS") == "-", "\(d)")
            #expect(cell(d, "TOP IN-APP FRAME").hasPrefix("App.Legacy.run()"), "\(d)")
            #expect(!result.stdout.contains(Self.sigA), "SIG shows a prefix, not the whole signature: \(result)")
        }
    }

    @Test("--top limits the groups but not the classes or the histogram")
    func topLimit() async throws {
        try await withTemporaryDirectory { directory in
            _ = try Self.write(in: directory)
            let result = try await CLI.run(["report", directory.path, "--format", "json", "--top", "1"])
            try #require(result.status == 0, "\(result)")
            let summary = try JSONDecoder().decode(StallSummary.self, from: Data(result.stdout.utf8))
            #expect(summary.groups.map(\.signature) == [Self.sigA])
            #expect(summary.classes == ["cpu": 3, "blocked": 3, "starved": 1, "unknown": 1])
            #expect(summary.histogram.map(\.count) == Self.expectedHistogram.map(\.count))
        }
    }
}
