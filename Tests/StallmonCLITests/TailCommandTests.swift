import Foundation
@testable import Stallmon
@testable import StallmonReport
import StallmonTestSupport
import Testing

/// `stallmon tail LOG`: the last events of the JSON-lines log, pretty or raw, and `--follow`.
@Suite("stallmon tail")
struct TailCommandTests {
    /// `[b0 e0 b1 e1 GARBAGE b2 e2 … b7 e7]`: 16 events and one line that is not an event, not among the last 10.
    struct Log {
        static let garbage = "this line is not an event"
        let directory: TemporaryDirectory
        let path: String
        let lines: [String]

        init(count: Int = 8, garbageAfter: Int? = 4) throws {
            directory = try TemporaryDirectory()
            var lines: [String] = []
            for index in 0..<count {
                let id = "id-\(index)"
                lines.append(try EventFixture.line(EventFixture.begin(index, id: id)))
                lines.append(try EventFixture.line(EventFixture.end(index, id: id, report: Self.reportPath(index))))
            }
            if let garbageAfter { lines.insert(Self.garbage, at: garbageAfter) }
            self.lines = lines
            path = try directory.write("events.jsonl", lines.joined(separator: "\n") + "\n")
        }

        static func reportPath(_ index: Int) -> String { "/var/lib/app/stallmon/stall-\(index).json" }

        /// Text only the last line (`e7`) prints: once it is on stdout, every initial line is.
        static let lastLineMarker = "→ " + reportPath(7)

        var eventLines: [String] { lines.filter { $0 != Self.garbage } }
    }

    /// The pretty line of `stall.end` number `index`.
    static func expectEndLine(_ line: String, index: Int, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(line.hasPrefix(Fixture.start(index) + "  stall.end      main  "), "\(line)",
                sourceLocation: sourceLocation)
        #expect(line.contains(Fixture.ms(150 + Double(index))), "\(line)", sourceLocation: sourceLocation)
        #expect(line.contains("7 samples"), "\(line)", sourceLocation: sourceLocation)
        #expect(line.contains("running timer.tick"), "\(line)", sourceLocation: sourceLocation)
        #expect(line.contains("in App.Worker.step\(index)() (Worker.swift:\(index))"), "\(line)",
                sourceLocation: sourceLocation)
        #expect(line.hasSuffix("→ \(Log.reportPath(index))"), "\(line)", sourceLocation: sourceLocation)
    }

    @Test("default: the last 10 events, pretty")
    func lastTenPretty() async throws {
        let log = try Log()
        defer { log.directory.remove() }
        let result = try await CLI.run(["tail", log.path])
        #expect(result.status == 0, "\(result)")
        #expect(result.stderr.isEmpty, "\(result)")
        let lines = result.stdoutLines
        #expect(lines.count == 10, "\(result)")
        guard lines.count == 10 else { return }
        // b3 e3 … b7 e7
        for (offset, line) in lines.enumerated() {
            let index = 3 + offset / 2
            if offset % 2 == 0 {
                // The event name is padded to 13 characters.
                #expect(line.hasPrefix(Fixture.start(index) + "  stall.begin    main  busy "), "\(line)")
                #expect(line.contains("busy 100.5 ms (threshold 100.0 ms)"), "\(line)")
                #expect(line.contains("running timer.tick"), "\(line)")
                #expect(line.hasSuffix("in App.Worker.step\(index)()"), "\(line)")
            } else {
                Self.expectEndLine(line, index: index)
            }
        }
    }

    @Test("-n 1 prints only the newest event")
    func lastOne() async throws {
        let log = try Log()
        defer { log.directory.remove() }
        for arguments in [["tail", "-n", "1", log.path], ["tail", "--lines", "1", log.path]] {
            let result = try await CLI.run(arguments)
            #expect(result.status == 0, "\(result)")
            #expect(result.stdoutLines.count == 1, "\(result)")
            if let line = result.stdoutLines.first { Self.expectEndLine(line, index: 7) }
        }
        let none = try await CLI.run(["tail", "-n", "0", log.path])
        #expect(none.status == 0, "\(none)")
        #expect(none.stdout.isEmpty, "\(none)")
    }

    @Test("lines that are not events go to stderr")
    func garbageToStderr() async throws {
        let log = try Log()
        defer { log.directory.remove() }
        let result = try await CLI.run(["tail", "-n", "100", log.path])
        #expect(result.status == 0, "\(result)")
        #expect(result.stdoutLines.count == 16, "\(result)")
        #expect(result.stderrLines == ["stallmon: not an event: \(Log.garbage)"], "\(result)")
    }

    @Test("--format json prints the raw lines")
    func rawLines() async throws {
        let log = try Log()
        defer { log.directory.remove() }
        let result = try await CLI.run(["tail", "--format", "json", "-n", "3", log.path])
        #expect(result.status == 0, "\(result)")
        #expect(result.stdoutLines == Array(log.lines.suffix(3)), "\(result)")
        for line in result.stdoutLines {
            let event = try JSONDecoder().decode(StallEvent.self, from: Data(line.utf8))
            #expect(["stall.begin", "stall.end"].contains(event.event))
        }
        let last = try JSONDecoder().decode(StallEvent.self, from: Data(result.stdoutLines.last!.utf8))
        #expect(last == EventFixture.end(7, id: "id-7", report: Log.reportPath(7)))
    }

    @Test("other events: message and count")
    func otherEvents() async throws {
        try await withTemporaryDirectory { directory in
            var error = StallEvent(time: "2026-01-10T12:00:00.000Z", event: "monitor.error")
            error.message = "cannot write stall reports: disk full"
            var dropped = StallEvent(time: "2026-01-10T12:00:01.000Z", event: "reports.dropped")
            dropped.count = 3
            let path = try directory.write("events.jsonl",
                                           try EventFixture.line(error) + "\n" + EventFixture.line(dropped) + "\n")
            let result = try await CLI.run(["tail", path])
            #expect(result.status == 0, "\(result)")
            #expect(result.stdoutLines.count == 2, "\(result)")
            #expect(result.stdoutLines.first?.contains("monitor.error") == true, "\(result)")
            #expect(result.stdoutLines.first?.hasSuffix("cannot write stall reports: disk full") == true, "\(result)")
            #expect(result.stdoutLines.last?.hasSuffix("count 3") == true, "\(result)")
        }
    }

    @Test("loop.stats: iterations, busy percentiles and utilization; a stall's mode when not the default")
    func loopStatsAndMode() async throws {
        try await withTemporaryDirectory { directory in
            var stats = StallEvent(time: "2026-01-10T12:00:00.000Z", event: "loop.stats")
            stats.loop = "main"
            stats.windowS = 60
            stats.iterations = 120_000
            stats.busyP50Ms = 0.2
            stats.busyP90Ms = 1.5
            stats.busyP99Ms = 12.5
            stats.busyMaxMs = 140
            stats.utilization = 0.4235
            var begin = StallEvent(time: "2026-01-10T12:00:01.000Z", event: "stall.begin")
            begin.loop = "main"
            begin.elapsedMs = 101
            begin.thresholdMs = 100
            begin.mode = "tracking"
            let path = try directory.write("events.jsonl",
                                           try EventFixture.line(stats) + "\n" + EventFixture.line(begin) + "\n")
            let result = try await CLI.run(["tail", path])
            #expect(result.status == 0, "\(result)")
            let lines = result.stdoutLines
            #expect(lines.count == 2, "\(result)")
            #expect(lines.first?.contains("loop.stats     main  120000 iterations in 60 s") == true, "\(result)")
            #expect(lines.first?.contains("busy p50 0.2 ms p99 12.5 ms max 140.0 ms") == true, "\(result)")
            #expect(lines.first?.hasSuffix("utilization 42.4 %") == true, "\(result)")
            #expect(lines.last?.contains("in mode tracking") == true, "\(result)")
        }
    }

    @Test("pool.stats: jobs, run time and queue delay percentiles, slow and delayed jobs, busy ratio, workers")
    func poolStats() async throws {
        try await withTemporaryDirectory { directory in
            var stats = StallEvent(time: "2026-01-10T12:00:00.000Z", event: "pool.stats")
            stats.loop = "swift-global-executor"
            stats.priority = "medium"
            stats.windowS = 60
            stats.jobs = 2026
            stats.runP50Ms = 0.000204
            stats.runP99Ms = 0.656
            stats.runMaxMs = 310.4
            stats.delayP50Ms = 0.014
            stats.delayP99Ms = 0.77
            stats.delayMaxMs = 276.8
            stats.slowJobs = 2
            stats.longDelays = 20
            stats.utilization = 0.3024
            stats.workers = 3
            let path = try directory.write("events.jsonl", try EventFixture.line(stats) + "\n")
            let result = try await CLI.run(["tail", path])
            #expect(result.status == 0, "\(result)")
            #expect(result.stdoutLines == [
                "2026-01-10T12:00:00.000Z  pool.stats     swift-global-executor  medium  2026 jobs in 60 s  "
                    + "run p50 204 ns p99 656.0 µs max 310.4 ms  queue delay p50 14.0 µs p99 770.0 µs max 276.8 ms  "
                    + "2 slow, 20 delayed past the threshold  busy 30.2 %  3 workers",
            ], "\(result)")
        }
    }

    @Test("a missing log exits 1")
    func missingLog() async throws {
        try await withTemporaryDirectory { directory in
            let missing = directory.path("nope.jsonl")
            let result = try await CLI.run(["tail", missing])
            #expect(result.status == 1, "\(result)")
            #expect(result.stdout.isEmpty, "\(result)")
            #expect(result.stderr.contains(missing), "\(result)")
            #expect(result.stderr.contains("cannot read event log"), "\(result)")

            let following = try await CLI.run(["tail", "--follow", missing], timeout: .seconds(10))
            #expect(!following.timedOut, "\(following)")
            #expect(following.status == 1, "\(following)")
        }
    }

    @Test("the log comes from event_log of the configuration")
    func logFromConfiguration() async throws {
        let log = try Log()
        defer { log.directory.remove() }
        let result = try await CLI.run(["tail", "-n", "1"], environment: ["STALLMON_EVENT_LOG": log.path])
        #expect(result.status == 0, "\(result)")
        if let line = result.stdoutLines.first { Self.expectEndLine(line, index: 7) }
    }

    @Test("-n counts events, not lines: a trailing line that is not an event does not hide one")
    func countsEventsNotLines() async throws {
        let log = try Log(garbageAfter: nil)
        defer { log.directory.remove() }
        try append(Log.garbage + "\n", to: log.path)
        let result = try await CLI.run(["tail", "-n", "1", log.path])
        #expect(result.status == 0, "\(result)")
        #expect(result.stdoutLines.count == 1, "\(result)")
        if let line = result.stdoutLines.first { Self.expectEndLine(line, index: 7) }
    }

    @Test("--format json: lines that are not events still go to stderr, not into the JSON stream")
    func rawFormatKeepsGarbageOut() async throws {
        let log = try Log()
        defer { log.directory.remove() }
        let result = try await CLI.run(["tail", "--format", "json", "-n", "100", log.path])
        #expect(result.status == 0, "\(result)")
        #expect(result.stdoutLines == log.eventLines, "\(result)")
        #expect(result.stderr.contains(Log.garbage), "\(result)")
    }
}

/// `stallmon tail --follow`: runs until killed, printing events as they are appended, across rotation.
@Suite("stallmon tail --follow", .serialized)
struct TailFollowTests {
    static let followTimeout: Duration = .seconds(8)

    static func endLine(_ index: Int, id: String? = nil) throws -> String {
        try EventFixture.line(EventFixture.end(index, id: id ?? "id-\(index)",
                                               report: TailCommandTests.Log.reportPath(index))) + "\n"
    }

    static func occurrences(of text: String, in output: String) -> Int {
        output.components(separatedBy: text).count - 1
    }

    @Test("appended events are printed as they arrive")
    func followAppends() async throws {
        let log = try TailCommandTests.Log()
        defer { log.directory.remove() }
        let tail = try RunningCLI(["tail", "--follow", "-n", "2", log.path])
        defer { tail.cleanUp() }
        #expect(await tail.waitForStdout(containing: TailCommandTests.Log.lastLineMarker, timeout: Self.followTimeout),
                "initial events: \(tail.stdout) / \(tail.stderr)")
        #expect(!tail.stdout.contains("step6()"), "only the last 2: \(tail.stdout)")

        try append(Self.endLine(8), to: log.path)
        #expect(await tail.waitForStdout(containing: "App.Worker.step8()", timeout: Self.followTimeout),
                "appended event: \(tail.stdout) / \(tail.stderr)")

        // Half a line is held back until it is complete.
        let line9 = try Self.endLine(9)
        let cut = line9.index(line9.startIndex, offsetBy: 40)
        try append(String(line9[..<cut]), to: log.path)
        try await Task.sleep(for: .milliseconds(600))
        #expect(!tail.stdout.contains("step9()"), "\(tail.stdout)")
        #expect(!tail.stderr.contains("not an event"), "a partial line is not reported: \(tail.stderr)")
        try append(String(line9[cut...]), to: log.path)
        #expect(await tail.waitForStdout(containing: "App.Worker.step9()", timeout: Self.followTimeout),
                "completed line: \(tail.stdout) / \(tail.stderr)")

        #expect(tail.process.isRunning, "--follow runs until killed")
        let lines = tail.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 4, "\(tail.stdout)")
        if lines.count == 4 { TailCommandTests.expectEndLine(lines[3], index: 9) }
        #expect(tail.stderr.isEmpty, "\(tail.stderr)")
    }

    @Test("--follow survives rotation: renamed away, new file created")
    func followRotation() async throws {
        let log = try TailCommandTests.Log()
        defer { log.directory.remove() }
        let tail = try RunningCLI(["tail", "--follow", log.path])
        defer { tail.cleanUp() }
        #expect(await tail.waitForStdout(containing: TailCommandTests.Log.lastLineMarker, timeout: Self.followTimeout),
                "initial events: \(tail.stdout) / \(tail.stderr)")
        let before = Self.occurrences(of: "stall.", in: tail.stdout)
        #expect(before == 10)

        try FileManager.default.moveItem(atPath: log.path, toPath: log.path + ".1")
        try await Task.sleep(for: .milliseconds(500))  // the follower finds no file for a while
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        try append(Self.endLine(20), to: log.path)
        #expect(await tail.waitForStdout(containing: "App.Worker.step20()", timeout: Self.followTimeout),
                "event in the new file: \(tail.stdout) / \(tail.stderr)")
        try append(Self.endLine(21), to: log.path)
        #expect(await tail.waitForStdout(containing: "App.Worker.step21()", timeout: Self.followTimeout),
                "second event in the new file: \(tail.stdout) / \(tail.stderr)")

        #expect(tail.process.isRunning)
        #expect(Self.occurrences(of: "stall.", in: tail.stdout) == before + 2, "nothing printed twice: \(tail.stdout)")
        #expect(Self.occurrences(of: "App.Worker.step20()", in: tail.stdout) == 1)
        #expect(tail.stderr.isEmpty, "\(tail.stderr)")
    }

    @Test("--follow starts over when the log is truncated in place")
    func followTruncation() async throws {
        let log = try TailCommandTests.Log()
        defer { log.directory.remove() }
        let tail = try RunningCLI(["tail", "--follow", "-n", "1", log.path])
        defer { tail.cleanUp() }
        #expect(await tail.waitForStdout(containing: TailCommandTests.Log.lastLineMarker, timeout: Self.followTimeout),
                "initial events: \(tail.stdout) / \(tail.stderr)")
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: log.path))
        try handle.truncate(atOffset: 0)
        try handle.close()
        try await Task.sleep(for: .milliseconds(500))
        try append(Self.endLine(30), to: log.path)
        #expect(await tail.waitForStdout(containing: "App.Worker.step30()", timeout: Self.followTimeout),
                "event after truncation: \(tail.stdout) / \(tail.stderr)")
        #expect(tail.process.isRunning)
    }

    @Test("--follow prints events written to the old file just before it was rotated")
    func followRotationKeepsLastOldEvents() async throws {
        let log = try TailCommandTests.Log()
        defer { log.directory.remove() }
        let tail = try RunningCLI(["tail", "--follow", log.path])
        defer { tail.cleanUp() }
        #expect(await tail.waitForStdout(containing: TailCommandTests.Log.lastLineMarker, timeout: Self.followTimeout),
                "initial events: \(tail.stdout) / \(tail.stderr)")
        // What EventLog does when it rotates: the last line goes to the old file, then rename, then a new file.
        try append(Self.endLine(40), to: log.path)
        try FileManager.default.moveItem(atPath: log.path, toPath: log.path + ".1")
        _ = FileManager.default.createFile(atPath: log.path, contents: Data(try Self.endLine(41).utf8))
        #expect(await tail.waitForStdout(containing: "App.Worker.step41()", timeout: Self.followTimeout),
                "\(tail.stdout) / \(tail.stderr)")
        #expect(tail.stdout.contains("App.Worker.step40()"), "event written before the rotation: \(tail.stdout)")
    }
}
