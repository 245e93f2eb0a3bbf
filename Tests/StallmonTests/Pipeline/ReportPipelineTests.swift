import CStallmonLoopShims
import Foundation
@testable import Stallmon
import StallmonLoop
import StallmonReport
import StallmonTestSupport
import Synchronization
import Testing

@Suite(.serialized)
struct ReportPipelineTests {
    /// A sink that counts what it was given and how often it was started and stopped.
    final class CountingSink: StallReportSink {
        let received = Mutex<[String]>([])
        let starts = Atomic<Int>(0)
        let stops = Atomic<Int>(0)
        func receive(_ written: WrittenStallReport) throws { received.withLock { $0.append(written.report.loop) } }
        func start() { starts.wrappingAdd(1, ordering: .relaxed) }
        func stop(deadline: Duration) { stops.wrappingAdd(1, ordering: .relaxed) }
    }

    @Test func sixteenLoopsShareOneWriterSymbolicatorAndSinkAndEachReportIsOnItsLoop() throws {
        let directory = makeTemporaryDirectory()
        let sink = CountingSink()
        let loops = try (0..<16).map { try Looper(name: "loop-\($0)") }
        let monitors = try loops.map {
            try LooperStallMonitor(loop: $0,
                                   configuration: .init(detection: .init(threshold: .milliseconds(80)),
                                                        reports: .init(directory: directory)),
                                   sinks: [sink])
        }
        monitors.forEach { $0.start() }
        let pipeline = try #require(ReportPipeline.existing(for: directory))
        let rssBefore = residentBytes()
        let threadIDs = Mutex<[String: Int32]>([:])
        for (loop, monitor) in zip(loops, monitors) {
            loop.perform(label: "stall") {
                threadIDs.withLock { $0[loop.name] = cstallmon_gettid() }
                // 200 ms, and on until detected: one watchdog looks at sixteen loops, however late a loaded
                // machine runs it.
                stallmonTestSleep(milliseconds: 200)
                let deadline = ContinuousClock.now + .seconds(30)
                while monitor.statistics.stallsDetected == 0 && ContinuousClock.now < deadline {
                    stallmonTestSleep(milliseconds: 10)
                }
            }
        }
        let threads = loops.map { runOnThread($0, for: .milliseconds(700)) }
        #expect(eventually(timeout: .seconds(40)) { threadIDs.withLock { $0.count } == 16 })
        #expect(eventually(timeout: .seconds(40)) { loops.allSatisfy { !$0.isRunning } })
        _ = threads
        #expect(ReportPipeline.existing(for: directory) === pipeline)
        #expect(pipeline.writer.symbolicatorsCreated.load(ordering: .relaxed) == 1)
        let rssAfter = residentBytes()
        monitors.forEach { $0.stop() }
        #expect(ReportPipeline.existing(for: directory) == nil, "the last monitor to leave stops the pipeline")
        print("16 loops: resident memory grew by \((rssAfter - rssBefore) / 1_048_576) MiB while all of them reported")

        let reports = readReports(directory)
        #expect(reports.count == 16)
        let ids = threadIDs.withLock { $0 }
        for report in reports {
            #expect(report.thread.tid == ids[report.loop], "\(report.loop) reported on thread \(report.thread.tid)")
            #expect(report.topFrame?.symbol.contains("stallmonTestSleep") == true)
        }
        #expect(Set(reports.map(\.loop)).count == 16)
        #expect(sink.starts.load(ordering: .relaxed) == 1 && sink.stops.load(ordering: .relaxed) == 1)
        #expect(sink.received.withLock { Set($0) }.count == 16)
        let lines = try String(contentsOfFile: directory + "/events.jsonl", encoding: .utf8).split(separator: "\n")
        let events = try lines.map { try JSONDecoder().decode(StallEvent.self, from: Data($0.utf8)) }
        #expect(events.filter { $0.event == "stall.begin" }.count == 16)
        #expect(Set(events.filter { $0.event == "stall.end" }.compactMap(\.loop)).count == 16)
    }

    @Test func monitorsOfDifferentDirectoriesGetPipelinesOfTheirOwn() throws {
        let first = makeTemporaryDirectory()
        let second = makeTemporaryDirectory()
        let loop = try Looper(name: "shared")
        let a = try LooperStallMonitor(loop: loop, configuration: .init(reports: .init(directory: first)))
        let b = try LooperStallMonitor(loop: loop, configuration: .init(reports: .init(directory: second + "/")))
        let pipelineA = try #require(ReportPipeline.existing(for: first))
        let pipelineB = try #require(ReportPipeline.existing(for: second))
        #expect(pipelineA !== pipelineB)
        a.stop()
        #expect(ReportPipeline.existing(for: first) == nil)
        #expect(ReportPipeline.existing(for: second) === pipelineB)
        b.stop()
        #expect(ReportPipeline.existing(for: second) == nil)
    }

    @Test func aMonitorCreatedAfterTheLastOneLeftGetsAFreshPipelineThatWrites() throws {
        let directory = makeTemporaryDirectory()
        let loop = try Looper(name: "again")
        try LooperStallMonitor(loop: loop, configuration: .init(reports: .init(directory: directory))).stop()
        let monitor = try LooperStallMonitor(loop: loop, configuration: .init(
            detection: .init(threshold: .milliseconds(50)), reports: .init(directory: directory)))
        monitor.start()
        postChainedSpins(loop, count: 1, milliseconds: 120, detected: { monitor.statistics.stallsDetected }, then: { loop.stop() })
        loop.run(for: .seconds(60))
        monitor.stop()
        #expect(readReports(directory).count == 1)
    }

    private func residentBytes() -> Int {
        let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
        return (Int(line.split(separator: " ").dropFirst().first ?? "0") ?? 0) * 1024
    }
}

