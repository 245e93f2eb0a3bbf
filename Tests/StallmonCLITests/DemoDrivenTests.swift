import Foundation
@testable import Stallmon
@testable import StallmonReport
import StallmonTestSupport
import Testing

/// Checks that need real reports or a real monitored process: `stallmon demo` runs, one at a time (they measure
/// wall-clock time on a 2-core machine, so they must not compete with each other).
@Suite("stallmon demo-driven checks", .serialized)
struct DemoDrivenTests {}

extension DemoDrivenTests {
    /// `stallmon symbolicate` of a report whose executable was stripped, with and without its debug file.
    @Suite("stallmon symbolicate", .serialized)
    struct Symbolicate {
        static let function = "crunchPrimes"

        /// A real crunchPrimes report, and the same report as a monitor on a stripped copy of the executable would
        /// have written it (image-0 frames without names, analysis recomputed from module+offset keys).
        struct Stripped {
            let temporary: TemporaryDirectory
            let original: StallReport
            let stripped: StallReport
            let strippedPath: String
            let copy: String
            let debugDirectory: String
            let debugFile: String
        }

        static func prepare() async throws -> Stripped {
            let temporary = try TemporaryDirectory("stallmon-symbolicate")
            let run = try await DemoRun.run(in: temporary, name: "reports",
                                            ["--seconds", "2.5", "--stalls", "cpu"])
            try #require(run.result.status == 0, "\(run.result)")
            // Prefer a report whose top frame has a line (a sample's address may map to compiler-made code
            // without one).
            let candidates = run.reports(topIn: function).map(\.report)
            let original = try #require(candidates.first { $0.topFrame?.line != nil } ?? candidates.first,
                                        "no \(function) report: \(run.reports.keys.sorted())\n\(run.result)")
            let image = try #require(original.images.first, "no images")
            let buildId = try #require(image.buildId, "the executable has no build id: \(image)")
            try #require(buildId.count > 2)
            try #require(original.signature?.isEmpty == false, "no signature")
            try #require(original.frames.contains { $0.image == 0 && $0.symbol?.contains(function) == true },
                         "image 0 is not the executable with \(function): \(image)")

            // The stripped copy and the debug file split off the original.
            let copy = temporary.path("stallmon-stripped")
            try FileManager.default.copyItem(atPath: image.path, toPath: copy)
            let strip = try await ExternalTool.run("strip", [copy])
            try #require(strip.status == 0, "\(strip)")
            let debugDirectory = temporary.path("debug")
            let folder = "\(debugDirectory)/.build-id/\(buildId.prefix(2))"
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            let debugFile = "\(folder)/\(buildId.dropFirst(2)).debug"
            let objcopy = try await ExternalTool.run("objcopy", ["--only-keep-debug", image.path, debugFile])
            try #require(objcopy.status == 0, "\(objcopy)")

            var stripped = original
            stripped.images[0].path = copy
            for index in stripped.frames.indices where stripped.frames[index].image == 0 {
                stripped.frames[index].module = copy
                stripped.frames[index].symbol = nil
                stripped.frames[index].symbolOffset = nil
                stripped.frames[index].file = nil
                stripped.frames[index].line = nil
            }
            let analysis = StallAggregation.analyze(frames: stripped.frames, samples: stripped.samples)
            stripped.callTree = analysis.tree
            stripped.hottestStack = analysis.hottest
            stripped.topFrame = analysis.topFrame
            stripped.signature = analysis.signature
            let strippedPath = try temporary.write("stripped.json", Fixture.encode(stripped))
            return Stripped(temporary: temporary, original: original, stripped: stripped, strippedPath: strippedPath,
                            copy: copy, debugDirectory: debugDirectory, debugFile: debugFile)
        }

        @Test("--debug-dir with objcopy --only-keep-debug output restores names, lines and the signature")
        func withDebugDirectory() async throws {
            let fixture = try await Self.prepare()
            defer { fixture.temporary.remove() }
            #expect(fixture.stripped.signature != fixture.original.signature,
                    "sanity: without names the signature is another one")
            #expect(fixture.stripped.topFrame?.symbol.contains(Self.function) != true)

            let output = fixture.temporary.path("symbolicated.json")
            let result = try await CLI.run(["symbolicate", fixture.strippedPath, "--debug-dir",
                                            fixture.debugDirectory, "-o", output])
            #expect(result.status == 0, "\(result)")
            #expect(result.stdout.isEmpty, "written to -o, not stdout: \(result)")
            #expect(result.stderr.contains("\(fixture.copy): symbols from \(fixture.debugFile)"), "\(result)")

            let symbolicated = try ReportReader.read(output)
            let top = try #require(symbolicated.topFrame, "no top frame")
            #expect(top.symbol.contains(Self.function), "\(top)")
            #expect(top.line == fixture.original.topFrame?.line && top.file == fixture.original.topFrame?.file,
                    "the file:line the monitor found: \(top) vs \(String(describing: fixture.original.topFrame))")
            if fixture.original.topFrame?.line != nil {
                #expect((top.line ?? 0) > 0, "a line number: \(top)")
                #expect(top.file?.hasSuffix("DemoStalls.swift") == true, "\(top)")
            } else {
                // Rare: every sampled address of the function maps to compiler-made code without a line. Its other
                // frames must still get their lines back.
                #expect(symbolicated.frames.contains {
                    $0.symbol?.contains(Self.function) == true && ($0.line ?? 0) > 0
                }, "no \(Self.function) frame with a line")
            }
            #expect(symbolicated.signature == fixture.original.signature)
            #expect(symbolicated.hottestStack?.frames == fixture.original.hottestStack?.frames)
            for (index, frame) in fixture.original.frames.enumerated() where frame.image == 0 && frame.symbol != nil {
                #expect(symbolicated.frames[index].symbol == frame.symbol, "frame \(index)")
                #expect(symbolicated.frames[index].line == frame.line, "frame \(index): \(frame)")
                #expect(symbolicated.frames[index].module == fixture.copy, "frame \(index)")
            }
        }

        @Test("without --debug-dir the frames of the stripped image keep module+offset names")
        func withoutDebugDirectory() async throws {
            let fixture = try await Self.prepare()
            defer { fixture.temporary.remove() }
            let result = try await CLI.run(["symbolicate", fixture.strippedPath])
            #expect(result.status == 0, "\(result)")
            let symbolicated = try ReportReader.decode(Data(result.stdout.utf8), path: "stdout")
            let name = URL(fileURLWithPath: fixture.copy).lastPathComponent
            for (index, frame) in symbolicated.frames.enumerated() where frame.image == 0 {
                #expect(frame.symbol == nil, "frame \(index): \(frame)")
                #expect(frame.line == nil, "frame \(index): \(frame)")
            }
            let top = try #require(symbolicated.topFrame)
            #expect(top.symbol.hasPrefix("\(name)+0x"), "module+offset name: \(top)")
            #expect(symbolicated.signature == fixture.stripped.signature)
            #expect(symbolicated.signature != fixture.original.signature)
        }

        @Test("without --debug-dir stderr says no file with symbols was found for the stripped image")
        func withoutDebugDirectoryMessage() async throws {
            let fixture = try await Self.prepare()
            defer { fixture.temporary.remove() }
            let result = try await CLI.run(["symbolicate", fixture.strippedPath])
            #expect(result.status == 0, "\(result)")
            #expect(result.stderr.contains("\(fixture.copy): no file with its build id found"), "\(result)")
            #expect(!result.stderr.contains("\(fixture.copy): symbols from"), "\(result)")
        }

        @Test("a missing or corrupt report: exit 1, nothing written",
              arguments: ["missing", "corrupt", "empty", "foreign"])
        func badReport(kind: String) async throws {
            try await withTemporaryDirectory { directory in
                let path: String
                switch kind {
                case "missing": path = directory.path("stall-nope.json")
                case "corrupt": path = try directory.write("stall-bad.json", #"{"schema":"stallmon.report/1","id":"#)
                case "empty": path = try directory.write("stall-empty.json", "")
                default: path = try directory.write("stall-foreign.json", #"{"hello":"world"}"#)
                }
                let output = directory.path("out.json")
                let result = try await CLI.run(["symbolicate", path, "-o", output])
                #expect(result.status == 1, "\(result)")
                #expect(result.stderr.contains(path), "\(result)")
                #expect(!FileManager.default.fileExists(atPath: output), "nothing written")
            }
        }
    }

    /// A SIGSTOP of the whole process is not a stall.
    @Suite("demo: a frozen process is not a stall", .serialized)
    struct Freeze {
        /// Waits (up to 20 s) until the demo's monitor runs: its control socket exists.
        static func monitorStarted(directory: String, pid: Int32) async -> Bool {
            for _ in 0..<400 {
                if FileManager.default.fileExists(atPath: directory + "/control-\(pid).sock") { return true }
                try? await Task.sleep(for: .milliseconds(50))
            }
            return false
        }

        static func processState(_ pid: Int32) -> Character? {
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { return nil }
            return stat[stat.index(close, offsetBy: 2)...].first
        }

        @Test("SIGSTOP for 700 ms of a busy demo: no report, exactly one process.frozen event, of at least 500 ms")
        func freeze() async throws {
            try await withTemporaryDirectory { temporary in
                let directory = temporary.path("reports")
                // 8 s: on a loaded machine the monitor has been seen to start 3 s after the launch, and the demo's
                // run counts from its launch.
                let demo = try RunningCLI(["demo", "--seconds", "8", "--stalls", "none", "--busy-ms", "30",
                                           "--report-dir", directory], workingDirectory: temporary.url)
                defer { demo.cleanUp() }
                let pid = demo.process.processIdentifier
                // From when the monitor runs (its start-up takes longer on a loaded machine), not from the launch:
                // its control socket appears when it starts (stdout, to a file, is only flushed at exit).
                try #require(await Self.monitorStarted(directory: directory, pid: pid), "\(demo.result(timedOut: false))")
                try await Task.sleep(for: .milliseconds(1000))
                try #require(demo.process.isRunning, "the demo ended early: \(demo.result(timedOut: false))")
                #expect(kill(pid, SIGSTOP) == 0)
                try await Task.sleep(for: .milliseconds(100))
                #expect(Self.processState(pid) == "T", "stopped")
                try await Task.sleep(for: .milliseconds(600))
                #expect(kill(pid, SIGCONT) == 0)
                let finished = await demo.waitForExit(timeout: .seconds(30))
                let result = demo.result(timedOut: !finished)
                try #require(finished, "\(result)")
                #expect(!result.signaled && result.status == 0, "\(result)")
                #expect(result.stdout.contains("Monitor: 0 stalls detected, 0 reports written"), "\(result)")

                let names = try FileManager.default.contentsOfDirectory(atPath: directory)
                #expect(!names.contains { $0.hasPrefix("stall-") && $0.hasSuffix(".json") }, "\(names)")
                let log = try String(contentsOfFile: directory + "/events.jsonl", encoding: .utf8)
                let events = try log.split(separator: "\n").map {
                    try JSONDecoder().decode(StallEvent.self, from: Data($0.utf8))
                }
                let frozen = events.filter { $0.event == "process.frozen" }
                // One stop, one line: the freeze is judged from the whole process, never a watchdog's lateness.
                #expect(frozen.count == 1 && frozen.contains { ($0.durationMs ?? 0) >= 500 }, "\(log)")
                #expect(frozen.allSatisfy { $0.loop == "demo-main" }, "\(log)")
                #expect(!events.contains { $0.event.hasPrefix("stall.") }, "no stall events: \(log)")
            }
        }
    }

    /// The README's Looper example stops on SIGTERM through the loop (`addSignalHandler`), as the demo does: a
    /// SIGTERM in the middle of a stall ends the loop after the stall, and the monitor, stopped after the loop,
    /// writes it whole (issue 27, item 1).
    @Suite("demo: SIGTERM during a stall", .serialized)
    struct Termination {
        @Test("SIGTERM 0.6 s into a 1.5 s stall: exit 0, the stall's final report with its full duration")
        func sigtermDuringAStall() async throws {
            try await withTemporaryDirectory { temporary in
                let directory = temporary.path("reports")
                // A 600 ms threshold makes the demo's stalls 1.5 s long; stall.begin is logged at the crossing.
                let demo = try RunningCLI(["demo", "--seconds", "30", "--stalls", "cpu", "--threshold-ms", "600",
                                           "--report-dir", directory], workingDirectory: temporary.url)
                defer { demo.cleanUp() }
                let log = directory + "/events.jsonl"
                var began = false
                for _ in 0..<400 where !began {
                    began = ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("\"stall.begin\"")
                    if !began { try await Task.sleep(for: .milliseconds(50)) }
                }
                try #require(began, "no stall began: \(demo.result(timedOut: false))")
                #expect(kill(demo.process.processIdentifier, SIGTERM) == 0)
                let finished = await demo.waitForExit(timeout: .seconds(20))
                let result = demo.result(timedOut: !finished)
                try #require(finished, "\(result)")
                #expect(!result.signaled && result.status == 0, "stopped on request, not killed: \(result)")
                #expect(result.stdout.contains("signal 15, stopping"), "\(result)")
                // The stall SIGTERM came in, whole. With a 600 ms threshold the demo's 1.5 s stalls come back to back:
                // the next one's timer is due as the first ends, and a loaded run (CI) saw it fire in the same pass as
                // the signal; it is then reported whole too.
                let reports = try ReportReader.scan(directory: directory).reports.map(\.report)
                    .sorted { $0.start.monotonicNs < $1.start.monotonicNs }
                #expect((1...2).contains(reports.count), "\(reports.map { ($0.durationMs, $0.ongoing) })")
                let report = try #require(reports.first)
                #expect(reports.allSatisfy { !$0.ongoing }, "the stalls ended before the monitor stopped")
                #expect(report.durationMs >= 1_490, "the whole stall: \(report.durationMs) ms")
                #expect(report.topFrame?.symbol.contains("crunchPrimes") == true)
            }
        }
    }

    /// `hang_action = abort` (issue 27, item 3): a loop that never comes back ends the process by SIGABRT once its
    /// stall lasts `hang_abort_after_ms`, its report durable first; never for a frozen process; off by default.
    @Suite("demo: hang_action = abort", .serialized)
    struct HangAbort {
        /// No core file from the test's SIGABRTs, and no Swift backtracer run (~1 s) before the process ends.
        static func environment(_ settings: [String: String]) -> [String: String] {
            var limit = rlimit(rlim_cur: 0, rlim_max: 0)
            getrlimit(Int32(RLIMIT_CORE.rawValue), &limit)
            limit.rlim_cur = 0
            setrlimit(Int32(RLIMIT_CORE.rawValue), &limit)
            return settings.merging(["SWIFT_BACKTRACE": "enable=no"]) { $1 }
        }

        static func events(_ directory: String) -> [StallEvent] {
            let log = (try? String(contentsOfFile: directory + "/events.jsonl", encoding: .utf8)) ?? ""
            return log.split(separator: "\n").compactMap { try? JSONDecoder().decode(StallEvent.self, from: Data($0.utf8)) }
        }

        @Test("a loop that hangs for good: SIGABRT at hang_abort_after_ms, the report written first")
        func aHungLoopEndsTheProcessAfterItsReport() async throws {
            try await withTemporaryDirectory { temporary in
                let directory = temporary.path("reports")
                let demo = try RunningCLI(["demo", "--seconds", "30", "--stalls", "hang", "--report-dir", directory],
                                          environment: Self.environment(["STALLMON_HANG_ACTION": "abort",
                                                                         "STALLMON_HANG_ABORT_AFTER_MS": "1500",
                                                                         "STALLMON_INTERIM_AFTER_MS": "10000"]),
                                          workingDirectory: temporary.url)
                defer { demo.cleanUp() }
                let finished = await demo.waitForExit(timeout: .seconds(20))
                let result = demo.result(timedOut: !finished)
                try #require(finished, "\(result)")
                #expect(result.signaled && result.status == SIGABRT, "ended by SIGABRT: \(result)")
                let reports = try ReportReader.scan(directory: directory).reports.map(\.report)
                let report = try #require(reports.first, "the report is on disk: \(result)")
                #expect(reports.count == 1)
                #expect(report.hang == StallReport.Hang(action: "abort", afterMs: 1500))
                #expect(report.ongoing, "the stall never ended")
                // Never before the limit. How late after it is the system's scheduling (the watchdog plans its pass at
                // the limit: `StallTrackerHangTests.anAbortLimitIsAPlannedPass`); the bound only catches an abort
                // left to a later pass, such as the interim report's, here at 10 s so that a loaded machine's late
                // pass is not taken for one.
                #expect(report.durationMs >= 1500 && report.durationMs < 5000, "\(report.durationMs) ms")
                #expect(report.topFrame?.symbol.contains("crunchPrimes") == true)
                // Nobody stopped the process: nothing of the stall is set aside as frozen (issue 32, item 4).
                #expect(report.frozenMs == nil, "\(report.frozenMs ?? 0) ms taken for a freeze")
                #expect(!Self.events(directory).contains { $0.event == "process.frozen" })
                let hang = Self.events(directory).filter { $0.event == "stall.hang" }
                #expect(hang.count == 1 && hang.first?.action == "abort" && hang.first?.report != nil, "\(hang)")
                let path = try #require(hang.first?.report)
                let shown = try await CLI.run(["show", path])
                #expect(shown.stdout.contains("hang:     past 1.50 s: the process was ended with SIGABRT"), "\(shown)")
            }
        }

        @Test("a frozen process (SIGSTOP longer than hang_abort_after_ms) is never aborted")
        func aFrozenProcessIsNotAborted() async throws {
            try await withTemporaryDirectory { temporary in
                let directory = temporary.path("reports")
                // 8 s: on a loaded machine the monitor has been seen to start 3 s after the launch, and the demo's
                // run counts from its launch.
                let demo = try RunningCLI(["demo", "--seconds", "8", "--stalls", "none", "--busy-ms", "30",
                                           "--report-dir", directory],
                                          environment: Self.environment(["STALLMON_HANG_ACTION": "abort",
                                                                         "STALLMON_HANG_ABORT_AFTER_MS": "1000"]),
                                          workingDirectory: temporary.url)
                defer { demo.cleanUp() }
                let pid = demo.process.processIdentifier
                try #require(await Freeze.monitorStarted(directory: directory, pid: pid), "\(demo.result(timedOut: false))")
                try await Task.sleep(for: .milliseconds(700))
                try #require(demo.process.isRunning, "\(demo.result(timedOut: false))")
                #expect(kill(pid, SIGSTOP) == 0)
                try await Task.sleep(for: .milliseconds(1800))
                #expect(kill(pid, SIGCONT) == 0)
                let finished = await demo.waitForExit(timeout: .seconds(30))
                let result = demo.result(timedOut: !finished)
                try #require(finished, "\(result)")
                #expect(!result.signaled && result.status == 0, "ran to its end: \(result)")
                #expect(!Self.events(directory).contains { $0.event == "stall.hang" })
                #expect(Self.events(directory).contains { $0.event == "process.frozen" })
            }
        }

        @Test("off by default: a hung loop is reported, never aborted")
        func offByDefault() async throws {
            #expect(StallMonitorConfiguration().hangs.action == .none)
            try await withTemporaryDirectory { temporary in
                let directory = temporary.path("reports")
                let demo = try RunningCLI(["demo", "--seconds", "30", "--stalls", "hang", "--report-dir", directory,
                                           "--threshold-ms", "100"],
                                          environment: Self.environment(["STALLMON_INTERIM_AFTER_MS": "500"]),
                                          workingDirectory: temporary.url)
                defer { demo.cleanUp() }
                var interim = false
                for _ in 0..<100 where !interim {
                    try await Task.sleep(for: .milliseconds(50))
                    interim = Self.events(directory).contains { $0.event == "stall.interim" }
                }
                try await Task.sleep(for: .milliseconds(1500))
                #expect(interim, "the hang is reported (interim)")
                #expect(demo.process.isRunning, "still running: \(demo.result(timedOut: false))")
                #expect(!Self.events(directory).contains { $0.event == "stall.hang" })
                #expect(!Self.events(directory).contains { $0.event == "process.frozen" }, "nobody stopped the process")
            }
        }
    }

    /// The signature names a kind of stall, not one process: the same across runs and address layouts.
    @Suite("demo: signatures are stable across runs", .serialized)
    struct SignatureStability {
        static var aslrEnabled: Bool {
            let setting = (try? String(contentsOfFile: "/proc/sys/kernel/randomize_va_space", encoding: .utf8))?
                .trimmingCharacters(in: .whitespacesAndNewlines)
            let personality = (try? String(contentsOfFile: "/proc/self/personality", encoding: .utf8))
                .flatMap { UInt32($0.trimmingCharacters(in: .whitespacesAndNewlines), radix: 16) } ?? 0
            return setting != nil && setting != "0" && personality & 0x0040000 == 0  // ADDR_NO_RANDOMIZE
        }

        @Test("two demo runs: crunchPrimes reports share one non-empty signature; ids and addresses differ")
        func stableSignature() async throws {
            try await withTemporaryDirectory { temporary in
                let first = try await DemoRun.run(in: temporary, name: "first", ["--seconds", "2.5", "--stalls", "cpu"])
                try #require(first.result.status == 0, "\(first.result)")
                let second = try await DemoRun.run(in: temporary, name: "second",
                                                   ["--seconds", "2.5", "--stalls", "cpu"])
                try #require(second.result.status == 0, "\(second.result)")
                let a = first.reports(topIn: "crunchPrimes").map(\.report)
                let b = second.reports(topIn: "crunchPrimes").map(\.report)
                try #require(!a.isEmpty && !b.isEmpty, "\(first.result)\n\(second.result)")

                let signatures = Set((a + b).map { $0.signature ?? "" })
                #expect(signatures.count == 1, "\(signatures)")
                let signature = try #require(signatures.first)
                #expect(signature.count == 16 && signature.allSatisfy(\.isHexDigit), "\(signature)")
                #expect(Set(a.map(\.id)).isDisjoint(with: b.map(\.id)), "distinct stalls")

                if Self.aslrEnabled, let biasA = a[0].images.first?.loadBias, biasA != "0x0" {
                    #expect(biasA != b[0].images.first?.loadBias, "ASLR moves the executable")
                    func crunchAddresses(_ report: StallReport) -> Set<String> {
                        Set(report.frames.filter { $0.symbol?.contains("crunchPrimes") == true }.map(\.address))
                    }
                    #expect(crunchAddresses(a[0]).isDisjoint(with: crunchAddresses(b[0])),
                            "same function, other addresses")
                }

                // Together, `stallmon report` puts them in one group.
                let merged = temporary.path("merged")
                try FileManager.default.createDirectory(atPath: merged, withIntermediateDirectories: true)
                for path in first.reports.keys.sorted() + second.reports.keys.sorted() {
                    try FileManager.default.copyItem(
                        atPath: path, toPath: merged + "/" + URL(fileURLWithPath: path).lastPathComponent)
                }
                let summaryRun = try await CLI.run(["report", merged, "--format", "json"])
                try #require(summaryRun.status == 0, "\(summaryRun)")
                let summary = try JSONDecoder().decode(StallSummary.self, from: Data(summaryRun.stdout.utf8))
                let group = try #require(summary.groups.first { $0.signature == signature }, "\(summaryRun)")
                #expect(group.count == a.count + b.count, "\(summaryRun)")
            }
        }
    }
}
