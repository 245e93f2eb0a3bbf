import Foundation
import StallmonLoop
import StallmonReport
import StallmonTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A real Vapor 4 service (Tests/VaporService, built by scripts/test.sh into .build-vapor) wired as the docs say for
/// Vapor, driven by real HTTP requests over 127.0.0.1. Vapor runs each async responder in a task of its own, and a
/// handler may start more: the label set once by the documented middleware must reach every one of them. Run outside
/// scripts/test.sh without that build, the tests skip with a printed reason; scripts/test.sh sets
/// REQUIRE_VAPOR_SERVICE=1, so in CI they must run.
@Suite("a Vapor 4 service's routes", .serialized)
struct VaporServiceTests {
    static let relativePath = ".build-vapor/debug/vapor-stall-service"

    static func service() -> String? {
        BuiltByTestScript.executable(relativePath, requiredBy: "REQUIRE_VAPOR_SERVICE",
                                     builtAs: "the package Tests/VaporService")
    }

    /// Starts the service, sends `paths` one after the other, waits (up to 15 s) until `until` holds of the reports,
    /// stops it; the reports, the service's stderr, and when (CLOCK_MONOTONIC) the service was seen ready: its port
    /// file written, before the first request.
    static func run(_ executable: String, paths: [String], until: @escaping ([StallReport]) -> Bool) throws
        -> (reports: [StallReport], errors: String, readyNs: UInt64)? {
        let root = makeTemporaryDirectory("vapor")
        let child = try ChildProcess(executable, [root + "/reports", root + "/port"],
                                     environment: StallmonExecutable.environment(), stdoutPath: root + "/out",
                                     stderrPath: root + "/err")
        defer { child.kill() }
        let port = HummingbirdServiceTests.port(of: child, root: root)
        let errors = { (try? String(contentsOfFile: root + "/err", encoding: .utf8)) ?? "" }
        guard let port else {
            Issue.record("the service did not start: \(errors())")
            return nil
        }
        let readyNs = MonotonicInstant.now().nanoseconds
        for path in paths { _ = HummingbirdServiceTests.get(path, port: port) }
        var reports: [StallReport] = []
        _ = eventually(timeout: .seconds(15)) {
            let directory = root + "/reports"
            reports = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [])
                .filter { $0.hasPrefix("stall-") && $0.hasSuffix(".json") }
                .compactMap { try? ReportReader.read(directory + "/" + $0) }
            return until(reports)
        }
        return (reports, errors(), readyNs)
    }

    @Test("async routes labelled with their route by the documented middleware, and so are the child and unstructured tasks a handler starts; a synchronous route is the event loop's stall, unlabelled")
    func everyTaskOfARequestIsLabelled() async throws {
        guard let executable = Self.service() else { return }
        let functions = ["Handlers.renderInvoice", "Handlers.readArchive", "Handlers.compressAttachment",
                         "Handlers.renderOnTheLoop"]
        let run = try await offThePool {
            try Self.run(executable, paths: ["/fast", "/cpu", "/users/42/invoice", "/fast", "/fanout", "/sync-cpu"],
                         until: { reports in
                             functions.allSatisfy { function in
                                 reports.contains { !$0.ongoing && $0.topFrame?.symbol.contains(function) == true }
                             } && reports.filter { $0.topFrame?.symbol.contains("renderInvoice") == true }.count >= 2
                         })
        }
        let reports = try #require(run?.reports)
        let stalls = reports.filter { $0.kind == nil && !$0.ongoing }
        func labels(of function: String) -> [String] {
            stalls.filter { $0.topFrame?.symbol.contains(function) == true }.map(\.label).sorted()
        }
        #expect(labels(of: "Handlers.renderInvoice") == ["GET /cpu", "GET /users/:id/invoice"],
                "each async route's responder task labelled with its matched pattern: \(stalls.map(\.label))")
        #expect(labels(of: "Handlers.readArchive") == ["GET /fanout"], "the handler's child task (async let)")
        #expect(labels(of: "Handlers.compressAttachment") == ["GET /fanout"], "the unstructured Task it started")
        for report in stalls where report.loop == "swift-global-executor" {
            #expect(report.job?.executor == "global" && report.job?.kind == "task")
        }
        // A synchronous route runs on the event loop: NIOStallMonitor's report, which has no task and so no label.
        let onTheLoop = stalls.filter { $0.topFrame?.symbol.contains("Handlers.renderOnTheLoop") == true }
        #expect(onTheLoop.count == 1)
        #expect(onTheLoop.first?.loop.hasPrefix("NIO-") == true, "\(onTheLoop.map(\.loop))")
        #expect(onTheLoop.first?.label == "")
        // Start-up may stall too, and is rightly reported: on a loaded disk, the main actor was once blocked 225 ms in
        // the fsync of the port file's atomic write, and a start-up check's task once waited 92 ms for a CPU. No
        // request had been sent yet; after it, every stall is a handler's, but for a near miss that waiting for a
        // CPU pushed over the threshold (a start-up check's task may run that late).
        let afterStart = HummingbirdServiceTests.requestsStalls(stalls, readyNs: run?.readyNs ?? 0)
        let startUp = stalls.filter { $0.start.monotonicNs < run?.readyNs ?? 0 }
        #expect(!afterStart.contains { $0.topFrame?.symbol.contains("Handlers.") != true },
                """
                no report for /fast: \(afterStart.map { ($0.loop, $0.topFrame?.symbol ?? "-", $0.durationMs) }); \
                left out, begun before the service was ready: \(startUp.map { ($0.loop, $0.topFrame?.symbol ?? "-") })
                """)
        // On two cores the fan-out's two tasks hold both workers: a starvation, each culprit with the route's label.
        for starvation in reports.compactMap(\.starvation) {
            #expect(starvation.culprits.allSatisfy { $0.label == "GET /fanout" }, "\(starvation.culprits.map(\.label))")
        }
    }

    @Test("the documented Vapor middleware is the one this service compiles, verbatim")
    func documentedMiddlewareIsCompiled() throws {
        let problems = try DocumentedSnippets.problems(
            ofSnippetImporting: "Vapor", compiledIn: "Tests/VaporService/Sources/StallLabelMiddleware.swift",
            repository: BuiltByTestScript.repository)
        #expect(problems.isEmpty, "\(problems)")
    }
}
