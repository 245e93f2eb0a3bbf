import Foundation
@testable import StallmonReport
import StallmonTestSupport
import Testing

/// `StallTimeline`: reports as a Chrome JSON trace, read back by `TraceEventChecker` (the format's rules, written
/// apart from the writer) and compared with the reports.
struct StallTimelineTests {
    static func microseconds(_ wall: String) -> Double { Double(WallTime.unixNanoseconds(wall)! / 1000) }

    /// A loop's two stalls, three overlapping stalls of pool workers, a starvation, a hang and an interim.
    static func reports() -> [StallReport] {
        var reports: [StallReport] = []
        reports.append(GroupFixture.report(id: "a", durationMs: 250.5, topSymbol: "App.Worker.step()",
                                           start: "2026-01-10T12:00:00.000Z", stallClass: .cpu, signature: "aaaa"))
        var hung = GroupFixture.report(id: "b", durationMs: 3000, topSymbol: "App.Worker.spin()",
                                       start: "2026-01-10T12:00:01.000Z", stallClass: .cpu)
        hung.hang = StallReport.Hang(action: "abort", afterMs: 2000)
        hung.ongoing = true
        var contention = StallReport.CPUContention(windowMs: 3000)
        contention.throttledMs = 1200
        contention.pressureSomePercent = 40
        hung.cpuContention = contention
        reports.append(hung)
        for (index, start) in ["12:00:00.100", "12:00:00.200", "12:00:00.900"].enumerated() {
            var worker = GroupFixture.report(id: "w\(index)", durationMs: 500, topSymbol: "App.Job.run()",
                                             start: "2026-01-10T\(start)Z", loop: "swift-global-executor",
                                             stallClass: .blocked)
            worker.thread.tid = Int32(5000 + index)
            reports.append(worker)
        }
        var starved = GroupFixture.report(id: "s", durationMs: 400, topSymbol: "App.Job.run()",
                                          start: "2026-01-10T12:00:00.150Z", loop: "swift-global-executor")
        starved.kind = "starvation"
        reports.append(starved)
        return reports
    }

    static func checked(_ reports: [StallReport]) throws -> TraceEventChecker.Checked {
        let data = try StallTimeline.json(reports.map(StallTimeline.Entry.init), paths: reports.map { "/r/stall-\($0.id).json" })
        switch TraceEventChecker.check(data) {
        case .success(let checked): return checked
        case .failure(let problems):
            Issue.record("\(problems.list)")
            throw problems
        }
    }

    @Test func eachStallIsASliceAtItsTimeInMicrosecondsWithItsFigures() throws {
        let reports = Self.reports()
        let checked = try Self.checked(reports)
        #expect(checked.slices.count == reports.count)
        for report in reports {
            let slice = try #require(checked.slices.first { $0.args["id"] == report.id }, "\(report.id)")
            #expect(slice.ts == Self.microseconds(report.start.wall))
            #expect(abs(slice.dur - report.durationMs * 1000) < 0.001)
            #expect(slice.args["report"] == "/r/stall-\(report.id).json")
            #expect(slice.name.contains(report.topFrame!.symbol) && slice.name.hasSuffix("[timer.tick]"), "\(slice.name)")
        }
        #expect(checked.slices.first { $0.args["id"] == "a" }?.args["class"] == "cpu")
        #expect(checked.slices.first { $0.args["id"] == "s" }?.name.hasPrefix("starved: ") == true)
    }

    @Test func overlappingStallsOfOneTrackGoToItsNextLanesAndTheTracksNest() throws {
        let checked = try Self.checked(Self.reports())
        func track(of id: String) -> String? {
            checked.slices.first { $0.args["id"] == id }.flatMap { checked.threadNames["\($0.pid)/\($0.tid)"] }
        }
        #expect(track(of: "a") == "main" && track(of: "b") == "main")
        #expect(track(of: "w0") == "swift-global-executor")
        #expect(track(of: "w1") == "swift-global-executor #2", "w1 began while w0 ran")
        #expect(track(of: "w2") == "swift-global-executor", "w0 had ended: its lane is free again")
        #expect(track(of: "s") == "swift-global-executor starvation")
        #expect(checked.processNames.values.contains("app (pid 4242 on testhost)"))
    }

    @Test func hangsAndInterimsAreInstantsAndTheLimitsFiguresCounters() throws {
        let checked = try Self.checked(Self.reports())
        let start = Self.microseconds("2026-01-10T12:00:01.000Z")
        #expect(checked.instants.contains { $0.name == "hang: abort after 2000 ms" && $0.ts == start + 2_000_000 })
        #expect(checked.instants.contains { $0.name == "still ongoing when last written" && $0.ts == start + 3_000_000 })
        let throttled = checked.counters.filter { $0.name == "throttled ms in stall" }
        #expect(throttled.map(\.ts) == [start, start + 3_000_000])
        #expect(throttled.map { $0.values["main"] } == [1200, 0])
        #expect(checked.counters.filter { $0.name == "cpu pressure % over stall" }.count == 2)
    }

    /// The trace's JSON is written by hand: names and arguments with quotes, backslashes, newlines, control
    /// characters and non-ASCII text read back as they were.
    @Test func textIsEscapedAsJSONRequires() throws {
        var report = GroupFixture.report(id: "e", durationMs: 120, topSymbol: #"App.quote("\")"#)
        report.label = "GET /ä?\"x\"\n\t\u{01}\\end"
        let checked = try Self.checked([report])
        let slice = try #require(checked.slices.first)
        #expect(slice.name == #"App.quote("\")"# + " [\(report.label)]")
        #expect(slice.args["label"] == report.label)
        #expect(slice.dur == 120_000)
    }

    @Test func enormousFiguresDoNotTrap() throws {
        var report = GroupFixture.report(id: "big", durationMs: 1e300, topSymbol: "App.Worker.step()")
        report.hang = StallReport.Hang(action: "abort", afterMs: 1e300)
        let events = StallTimeline.events([StallTimeline.Entry(report)])
        #expect(events.contains { $0.name.hasPrefix("hang: abort after 1e+300") })
    }

    @Test func aReportWhoseTimeDoesNotParseIsLeftOut() throws {
        var reports = Self.reports()
        reports[0].start.wall = "yesterday"
        let checked = try Self.checked(reports)
        #expect(checked.slices.count == reports.count - 1)
    }

    // MARK: - The checker itself can fail

    static func trace(_ events: [[String: Any]]) throws -> Data {
        try JSONSerialization.data(withJSONObject: ["traceEvents": events])
    }

    static var names: [[String: Any]] { [
        ["name": "process_name", "ph": "M", "pid": 1, "args": ["name": "p"]],
        ["name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": ["name": "t"]],
    ] }

    @Test func theCheckerRefusesPartialOverlapsMillisecondsAndUnnamedTracks() throws {
        let ts = 1.7e15
        let overlapping = Self.names + [
            ["name": "a", "ph": "X", "pid": 1, "tid": 1, "ts": ts, "dur": 100.0],
            ["name": "b", "ph": "X", "pid": 1, "tid": 1, "ts": ts + 50, "dur": 100.0],
        ]
        #expect(TraceEventChecker.problems(try Self.trace(overlapping)).contains { $0.contains("without nesting") })
        let nested = Self.names + [
            ["name": "a", "ph": "X", "pid": 1, "tid": 1, "ts": ts, "dur": 100.0],
            ["name": "b", "ph": "X", "pid": 1, "tid": 1, "ts": ts + 50, "dur": 50.0],
        ]
        #expect(TraceEventChecker.problems(try Self.trace(nested)).isEmpty)
        let milliseconds = Self.names + [["name": "a", "ph": "X", "pid": 1, "tid": 1, "ts": 1.7e12, "dur": 1.0]]
        #expect(TraceEventChecker.problems(try Self.trace(milliseconds)).contains { $0.contains("microsecond") })
        let unnamed = [["name": "a", "ph": "X", "pid": 2, "tid": 3, "ts": ts, "dur": 1.0]]
        let problems = TraceEventChecker.problems(try Self.trace(unnamed))
        #expect(problems.contains { $0.contains("no thread_name") } && problems.contains { $0.contains("no process_name") })
        let badInstant = Self.names + [["name": "i", "ph": "i", "pid": 1, "tid": 1, "ts": ts]]
        #expect(!TraceEventChecker.problems(try Self.trace(badInstant)).isEmpty)
    }
}
