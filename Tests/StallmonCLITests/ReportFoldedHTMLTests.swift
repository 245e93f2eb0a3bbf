import Foundation
@testable import Stallmon
@testable import StallmonReport
import StallmonTestSupport
import Testing

/// `stallmon report --folded FILE` and `--html FILE` (the page rendered in headless Chromium).
@Suite("stallmon report --folded / --html")
struct ReportFoldedHTMLTests {
    /// Fixture reports whose samples include an idle sample with a stack and a failed capture with a stack: both
    /// must be left out. Per report (see `Fixture.report`): 1 sample `[top, caller, main]`, 3 samples
    /// `[leaf, top, caller, main]`, 1 timed-out sample without frames; plus the two extra samples added here.
    struct Profile {
        let directory: TemporaryDirectory
        /// Folded lines expected, stack → count.
        let expected: [String: Int]
        /// Ok, non-idle samples with a stack across all reports.
        let evidence: Int
        let reports: [StallReport]

        static let tops = ["App.Worker.step()", "App.Cache.evict()", "App.Worker.step()", "App.Odd;Name.run()"]

        init() throws {
            directory = try TemporaryDirectory()
            var reports: [StallReport] = []
            for (index, top) in Self.tops.enumerated() {
                var report = GroupFixture.report(id: "p\(index)", durationMs: 150 + Double(index) * 100,
                                                 topSymbol: top, start: Fixture.start(index),
                                                 stallClass: index == 1 ? .blocked : .cpu,
                                                 signature: String(repeating: String(index), count: 16))
                // An idle capture (the loop back in epoll) and a failed unwind, both with frames: no evidence.
                report.samples.append(StallReport.Sample(offsetMs: 150, status: .ok, frames: [0, 1, 2, 3],
                                                         truncated: false, label: nil, state: "S", idle: true))
                report.samples.append(StallReport.Sample(offsetMs: 160, status: .unwindFailed, frames: [1, 2, 3],
                                                         truncated: false, label: nil))
                try Fixture.write(report, named: "p\(index)", in: directory)
                reports.append(report)
            }
            // Computed by hand from the fixture layout, names outermost first; ';' inside a name becomes ':'.
            let caller = Fixture.callerSymbol
            expected = [
                "main;\(caller);App.Worker.step()": 2,
                "main;\(caller);App.Worker.step();\(Fixture.leafSymbol)": 6,
                "main;\(caller);App.Cache.evict()": 1,
                "main;\(caller);App.Cache.evict();\(Fixture.leafSymbol)": 3,
                "main;\(caller);App.Odd:Name.run()": 1,
                "main;\(caller);App.Odd:Name.run();\(Fixture.leafSymbol)": 3,
            ]
            evidence = 4 * 4
            self.reports = reports
        }
    }

    @Test("--folded: one `frames count` line per stack, outermost first, counts sum to the evidence samples")
    func folded() async throws {
        let profile = try Profile()
        defer { profile.directory.remove() }
        let out = try TemporaryDirectory("stallmon-folded")
        defer { out.remove() }
        let path = out.path("stacks.folded")
        let result = try await CLI.run(["report", profile.directory.path, "--folded", path])
        #expect(result.status == 0, "\(result)")
        #expect(result.stderr.isEmpty, "\(result)")
        #expect(result.stdout.hasPrefix("Stalls in \(profile.directory.path): 4"), "still prints the summary")

        let text = try String(contentsOfFile: path, encoding: .utf8)
        #expect(text.hasSuffix("\n"), "\(text)")
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init)
        let pattern = try Regex(#"^(.+) ([0-9]+)$"#)
        var parsed: [String: Int] = [:]
        for line in lines {
            let match = try #require(try pattern.wholeMatch(in: line), "malformed line: \(line)")
            let stack = String(try #require(match.output[1].substring))
            let digits = String(try #require(match.output[2].substring))
            let count = try #require(Int(digits))
            #expect(parsed[stack] == nil, "one line per distinct stack: \(stack)")
            parsed[stack] = count
            let frames = stack.split(separator: ";", omittingEmptySubsequences: false)
            #expect(frames.first == "main", "outermost frame first: \(line)")
            #expect(frames.count >= 3 && frames[1] == Substring(Fixture.callerSymbol), "\(line)")
            #expect(!frames.contains(""), "no empty frame: \(line)")
        }
        #expect(parsed == profile.expected, "\(text)")
        #expect(parsed.values.reduce(0, +) == profile.evidence,
                "idle samples and failed captures are excluded: \(text)")
        #expect(lines == lines.sorted(), "lines are sorted: \(text)")
    }

    @Test("--folded of an empty directory writes an empty file")
    func foldedEmpty() async throws {
        try await withTemporaryDirectory { directory in
            let path = directory.path("empty.folded")
            let result = try await CLI.run(["report", directory.path, "--folded", path])
            #expect(result.status == 0, "\(result)")
            #expect(try String(contentsOfFile: path, encoding: .utf8) == "")
        }
    }

    @Test("--folded to an unwritable path: exit 1 naming it")
    func foldedUnwritable() async throws {
        let profile = try Profile()
        defer { profile.directory.remove() }
        let path = profile.directory.path("no-such-dir/stacks.folded")
        let result = try await CLI.run(["report", profile.directory.path, "--folded", path])
        #expect(result.status == 1, "\(result)")
        #expect(result.stderr.contains(path), "\(result)")
    }

    /// Loads `file://path` in headless Chromium and returns the DOM after its scripts ran.
    static func renderedDOM(_ path: String) async throws -> String {
        _ = try ExternalTool.find("chromium")  // fails the test, saying chromium is missing
        let profile = try TemporaryDirectory("stallmon-chromium-profile")
        defer { profile.remove() }
        let result = try await ExternalTool.run("chromium", [
            "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
            "--user-data-dir=\(profile.path)", "--no-first-run", "--disable-extensions",
            "--dump-dom", URL(fileURLWithPath: path).absoluteString,
        ], timeout: .seconds(60))
        try #require(!result.timedOut && result.status == 0, "\(result)")
        try #require(result.stdout.contains("</html>"), "no DOM dumped: \(result)")
        return result.stdout
    }

    /// The text of every element `<tag …class="…cls…"…>text</tag>` without nested elements.
    static func texts(of tag: String, classNamed cls: String, in dom: String) throws -> [String] {
        let regex = try Regex("<\(tag) [^>]*class=\"\(cls)\"[^>]*>([^<]*)</\(tag)>")
        return dom.matches(of: regex).compactMap { $0.output[1].substring.map(String.init) }
    }

    @Test("--html: the page renders the overview, one row per group, the histogram and the flame graph")
    func html() async throws {
        let profile = try Profile()
        defer { profile.directory.remove() }
        let out = try TemporaryDirectory("stallmon-html")
        defer { out.remove() }
        let path = out.path("report.html")
        let json = try await CLI.run(["report", profile.directory.path, "--format", "json"])
        let summary = try JSONDecoder().decode(StallSummary.self, from: Data(json.stdout.utf8))
        let result = try await CLI.run(["report", profile.directory.path, "--html", path])
        try #require(result.status == 0, "\(result)")
        #expect(result.stderr.isEmpty, "\(result)")

        // Self-contained: no network resource referenced.
        let page = try String(contentsOfFile: path, encoding: .utf8)
        let network = try Regex(#"(?i)(src|href)\s*=\s*["']?\s*(https?:)?//"#)
        #expect(page.firstMatch(of: network) == nil, "the page loads nothing from the network")
        #expect(!page.contains("<link"), "no external stylesheet")
        #expect(page.firstMatch(of: try Regex(#"(?i)<script[^>]*\bsrc\s*="#)) == nil, "no external script")
        #expect(page.firstMatch(of: try Regex(#"(?i)@import|url\(\s*['"]?https?:"#)) == nil, "no remote CSS")

        let dom = try await Self.renderedDOM(path)

        // Overview with the stall count.
        let overview = try #require(dom.firstMatch(of: try Regex(#"<div id="overview"[^>]*>([^<]*)</div>"#)),
                                    "no overview: \(dom.prefix(3000))")
        let overviewText = String(try #require(overview.output[1].substring))
        #expect(overviewText.hasPrefix("4 stalls in \(profile.directory.path)"), "\(overviewText)")
        #expect(overviewText.contains("(main)"), "\(overviewText)")

        // One group row per group, each with its top frame.
        let rows = dom.matches(of: try Regex(#"<tr class="group">(.*?)</tr>"#)).map { String($0.output[0].substring!) }
        #expect(rows.count == summary.groups.count && rows.count == 4, "\(rows)")
        let topFrames = try Self.texts(of: "td", classNamed: "frame top-frame", in: dom)
        #expect(topFrames.count == summary.groups.count, "\(topFrames)")
        for group in summary.groups {
            #expect(rows.contains { $0.contains(group.topFrame) && $0.contains(String(group.signature!.prefix(16))) },
                    "a row for \(group.topFrame) / \(group.signature ?? "-"): \(rows)")
        }
        #expect(rows.contains { $0.contains("App.Worker.step() (Worker.swift:42)") }, "file:line shown: \(rows)")
        #expect(rows.contains { $0.contains(#"<span class="class blocked">blocked</span>"#) }, "\(rows)")

        // Histogram: one rect per bucket, the used ones with a height.
        let svg = try #require(dom.firstMatch(of: try Regex(#"(?s)<svg id="histogram"(.*?)</svg>"#)), "no svg")
        let rects = String(svg.output[0].substring!).matches(of: try Regex(#"<rect [^>]*height="([0-9.]+)""#))
            .map { Double($0.output[1].substring!)! }
        #expect(rects.count == summary.histogram.count, "\(rects)")
        #expect(rects.filter { $0 > 0 }.count == summary.histogram.filter { $0.count > 0 }.count, "\(rects)")

        // Flame graph: nodes for the root and the fixture functions.
        let nodes = try Self.texts(of: "div", classNamed: "node", in: dom)
        #expect(nodes.contains("all"), "\(nodes)")
        for name in ["main", Fixture.callerSymbol, "App.Worker.step()", "App.Cache.evict()", Fixture.leafSymbol] {
            #expect(nodes.contains(name), "flame node \(name): \(nodes)")
        }
        let allTitle = try #require(dom.firstMatch(of: try Regex(#"class="node" title="all: ([0-9]+) samples""#)),
                                    "\(nodes)")
        #expect(Int(allTitle.output[1].substring!) == profile.evidence, "the root counts every evidence sample")
    }
}
