import Foundation
@testable import Stallmon
@testable import StallmonReport
import StallmonTestSupport
import Testing

/// Monitors of one report directory share one pipeline, and every monitor of the process one watchdog. Before, a
/// monitor whose set-up failed after joining the pipeline (no descriptor left for its own watchdog's eventfd, EMFILE)
/// left it twice, and the first monitor's reports were dropped (issue 41, item 5). Now nothing that can fail comes
/// after the join, and a second monitor needs no descriptor at all (issue 42): it is made with none left. In the
/// fixture's own process, since RLIMIT_NOFILE is lowered around the second creation.
struct SharedPipelineTests {
    @Test("a second monitor needs no descriptor of its own, and both monitors report")
    func aSecondMonitorSharesTheWatchdogAndThePipeline() async throws {
        let run = try await ConcurrencyStallMonitorTests.run("second-without-descriptors")
        #expect(run.status == 0, "\(run.output) \(run.errors)")
        #expect(run.value("refused") == nil, "the second monitor was refused: \(run.output) \(run.errors)")
        #expect(run.output.contains("done"), "\(run.output)")
        for loop in ["first-loop", "second-loop"] {
            let report = run.reports.first { $0.loop == loop }
            #expect(report != nil, "\(loop)'s stall is reported: \(run.reports.map(\.loop)) \(run.errors)")
            #expect(report?.topFrame?.symbol.contains("AsyncStalls.spinCPU") == true,
                    "\(loop): \(report?.topFrame?.symbol ?? "no top frame"), \(report.map { $0.samples.map(\.status) } ?? [])")
        }
    }

    /// One watchdog thread whatever the number of loops (issue 42): eight event loops, a `Looper` and the pool, and
    /// two loops stalled at once are both reported; none left once every monitor stopped.
    @Test func oneWatchdogThreadPerProcess() async throws {
        let run = try await ConcurrencyStallMonitorTests.run("one-watchdog")
        #expect(run.status == 0, "\(run.output) \(run.errors)")
        #expect(run.value("watchdogs") == "1", "\(run.output)")
        #expect(run.value("watchdogs-after-stop") == "0", "\(run.output)")
        let stalled = Set(run.reports.filter { $0.loop.hasPrefix("NIO-ELT") }.map(\.loop))
        #expect(stalled.count == 2, "both stalled loops reported: \(run.reports.map(\.loop)) \(run.errors)")
    }
}
