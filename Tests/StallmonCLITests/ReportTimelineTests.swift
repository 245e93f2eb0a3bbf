import Foundation
@testable import StallmonReport
import StallmonTestSupport
import Testing

/// `stallmon report --timeline FILE`: a Chrome JSON trace that passes the format's checker, with one slice per
/// selected stall, linked from the `--html` page written beside it.
@Suite("stallmon report --timeline")
struct ReportTimelineTests {
    @Test("--timeline and --html: the trace passes the checker, its slices are the selected stalls, the page links it")
    func timelineAndPage() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try ReportPprofTests.writeReports(in: directory)
        let trace = directory.path("timeline.json")
        let page = directory.path("report.html")
        let result = try await CLI.run(["report", directory.path, "--since", "2026-01-10T12:20:00Z",
                                        "--timeline", trace, "--html", page])
        #expect(result.status == 0, "\(result)")
        let data = try Data(contentsOf: URL(fileURLWithPath: trace))
        let checked: TraceEventChecker.Checked
        switch TraceEventChecker.check(data) {
        case .success(let value): checked = value
        case .failure(let problems):
            Issue.record("\(problems.list)")
            return
        }
        #expect(Set(checked.slices.compactMap { $0.args["id"] }) == ["pp0", "pp1", "pp2"], "--since applies")
        let worker = try #require(checked.slices.first { $0.args["id"] == "pp0" })
        #expect(worker.ts == Double(WallTime.unixNanoseconds(Fixture.start(1800))! / 1000) && worker.dur == 400_000)
        #expect(worker.name == "App.Worker.step() [timer.tick]")
        #expect(worker.args["traceId"] == "4bf92f3577b34da6a3ce929d0e0e4736")
        #expect(worker.args["report"]?.hasSuffix("stall-pp0.json") == true)
        #expect(Set(checked.threadNames.values) == ["main", "other"])
        let html = try String(contentsOfFile: page, encoding: .utf8)
        #expect(html.contains(#"<a href="timeline.json">timeline.json</a>"#), "linked beside the page")
    }
}
