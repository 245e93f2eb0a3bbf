import Foundation
@testable import Stallmon
@testable import StallmonReport
import StallmonTestSupport
import Testing

/// Monitors of one report directory share one pipeline. A monitor whose set-up fails after joining it (no descriptor
/// left for its watchdog's eventfd, EMFILE) left it, then left it again from its deinit: the pipeline's count reached
/// 0 with the first monitor still running, its writer stopped, and the first monitor's reports were dropped (issue
/// 41, item 5). In the fixture's own process, since RLIMIT_NOFILE is lowered around the second creation.
struct SharedPipelineTests {
    @Test("a second monitor that fails to set up leaves the first one's pipeline running")
    func aFailedSecondMonitorLeavesThePipelineToTheFirst() async throws {
        let run = try await ConcurrencyStallMonitorTests.run("failed-second")
        #expect(run.status == 0, "\(run.output) \(run.errors)")
        #expect(run.value("refused")?.contains("wake-up eventfd") == true, "the watchdog set-up failed: \(run.output) \(run.errors)")
        #expect(run.value("refused")?.contains("report writer") == false, "after joining the existing pipeline")
        #expect(run.output.contains("done"), "\(run.output)")
        let report = run.reports.first { $0.loop == "first-loop" }
        #expect(report != nil, "the first monitor's stall is reported: \(run.reports.map(\.loop)) \(run.errors)")
        #expect(report?.topFrame?.symbol.contains("AsyncStalls.spinCPU") == true)
    }
}
