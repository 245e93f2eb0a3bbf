import Foundation
import Testing
import StallmonLoop
@testable import Stallmon

@Suite(.serialized)
struct StallMonitorTests {
    @Test func aStallOf300msIsReportedOnceWithItsDurationAndStack() throws {
        let directory = makeTemporaryDirectory()
        let loop = try Looper(name: "main")
        let monitor = try StallMonitor(loop: loop, configuration: .init(threshold: .milliseconds(100),
                                                                         reportDirectory: directory))
        monitor.start()
        loop.schedule(after: .milliseconds(50), label: "spin-timer") { _ = stallmonTestBusySpin(milliseconds: 300) }
        loop.run(for: .milliseconds(800))
        monitor.stop()

        let reports = readReports(directory)
        #expect(reports.count == 1)
        let report = try #require(reports.first)
        #expect(!report.ongoing)
        #expect(report.durationSource == "loop")
        #expect(abs(report.durationMs - 300) <= 30, "duration \(report.durationMs) ms")
        #expect(report.label == "spin-timer")
        #expect(report.samples.count >= 10)
        let symbols = report.frames.compactMap(\.symbol)
        #expect(symbols.contains { $0.contains("stallmonTestBusySpin") }, "\(symbols.prefix(20))")
        #expect(report.topFrame?.symbol.contains("stallmonTestBusySpin") == true, "\(String(describing: report.topFrame))")
        #expect(monitor.statistics.stallsDetected == 1)
        #expect(monitor.statistics.reportsWritten == 1)
        print(String(data: try JSONEncoder().encode(report.topFrame), encoding: .utf8)!, report.captures)
    }
}
