import CStallmonLoopShims
import Foundation
import StallmonLoop
import StallmonReport
import StallmonTestSupport
import StallmonUpload
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A real Hummingbird 2 service (Tests/HummingbirdService, built by scripts/test.sh into .build-hb) wired as the
/// README says, driven by real HTTP requests over 127.0.0.1: every async route handler that blocks its worker is
/// reported with the handler's function and the worker thread. Run outside scripts/test.sh without that build, the
/// tests skip with a printed reason; scripts/test.sh sets REQUIRE_HUMMINGBIRD_SERVICE=1, so in CI they must run.
@Suite("a Hummingbird 2 service's async route handlers", .serialized)
struct HummingbirdServiceTests {
    static let relativePath = ".build-hb/debug/hb-stall-service"
    static let executable = BuiltByTestScript.repository + "/" + relativePath

    /// The service's path, or nil (with the reason printed) when it was not built and need not be.
    static func service() -> String? {
        BuiltByTestScript.executable(relativePath, requiredBy: "REQUIRE_HUMMINGBIRD_SERVICE",
                                     builtAs: "the package Tests/HummingbirdService")
    }

    /// GET `path` on 127.0.0.1:`port`; the response body, or nil.
    static func get(_ path: String, port: Int) -> String? {
        guard let fd = connectToLoopback(port: port) else { return nil }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let request = Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".utf8)
        guard send(fd, request, request.count, 0) == request.count else { return nil }
        var response: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = recv(fd, &buffer, buffer.count, 0)
            if count <= 0 { break }
            response += buffer[..<count]
        }
        let text = String(decoding: response, as: UTF8.self)
        guard let split = text.range(of: "\r\n\r\n") else { return nil }
        return String(text[split.upperBound...])
    }

    /// What one run of the service left: its reports, what the handlers measured, its exit and stderr.
    struct Outcome: Sendable {
        var started = false
        var measured = ""
        /// GET /spans: the spans a traced service finished (`span NAME TRACE_ID SPAN_ID` lines).
        var spans = ""
        /// Where the service wrote its reports.
        var reportDirectory = ""
        var errors = ""
        var exitCode: Int32?
        var reports: [StallReport] = []
        /// When (CLOCK_MONOTONIC) the service was seen ready, its port file written: before the first request.
        var readyNs: UInt64 = 0
        /// The reports of the requests' stalls (`requestsStalls`).
        var reportsAfterStart: [StallReport] { HummingbirdServiceTests.requestsStalls(reports, readyNs: readyNs) }
    }

    /// The reports of stalls that began after the service was seen ready (`readyNs`), but for near misses that
    /// waiting for a CPU pushed over the threshold: start-up's own stalls (an fsync on a loaded disk, a start-up task
    /// waiting for a CPU, which may run late) are rightly reported, and are not the requests'.
    static func requestsStalls(_ reports: [StallReport], readyNs: UInt64) -> [StallReport] {
        reports.filter { $0.start.monotonicNs >= readyNs && !$0.isNearMissPushedOverByWaitingForACPU }
    }

    /// Starts the service in `mode`, sends `paths` one after the other, reads /measurements, stops it. With
    /// `until`, the reports are read until it holds (up to 15 s) before the service is stopped: the last stall's
    /// reports are written after it ends, and how long after depends on the machine's load.
    static func run(_ mode: String, paths: [String], waitForExit: Bool = false, environment: [String: String] = [:],
                    traffic: (@Sendable (Int) -> Void)? = nil,
                    until: ((Outcome) -> Bool)? = nil) throws -> Outcome {
        let (root, child) = try launch(mode, environment: environment)
        defer { child.kill() }
        var outcome = Outcome()
        if waitForExit {
            _ = child.wait(timeout: .seconds(20))
            outcome.exitCode = child.exitCode
        } else {
            if let port = port(of: child, root: root) {
                outcome.started = true
                outcome.readyNs = MonotonicInstant.now().nanoseconds
                for path in paths { _ = get(path, port: port) }
                traffic?(port)
                if let until {
                    _ = eventually(timeout: .seconds(15)) {
                        collect(root, into: &outcome)
                        return until(outcome)
                    }
                } else {
                    usleep(300_000)  // the last stall's report is written after it ends
                }
                outcome.measured = get("/measurements", port: port) ?? ""
                outcome.spans = get("/spans", port: port) ?? ""
            }
        }
        collect(root, into: &outcome)
        return outcome
    }

    /// Starts the service in `mode` in a new scratch directory, with `environment` added to this process's.
    static func launch(_ mode: String, environment: [String: String] = [:]) throws -> (root: String, child: ChildProcess) {
        let root = makeTemporaryDirectory("hummingbird-\(mode)")
        let child = try ChildProcess(executable, [root + "/reports", root + "/port", mode],
                                     environment: StallmonExecutable.environment(environment), stdoutPath: root + "/out",
                                     stderrPath: root + "/err")
        return (root, child)
    }

    /// The port the service wrote once it listens, or nil when it exited or 20 s passed first.
    static func port(of child: ChildProcess, root: String) -> Int? {
        var port: Int?
        let deadline = Date().addingTimeInterval(20)
        while port == nil && Date() < deadline && !child.poll() {
            port = (try? String(contentsOfFile: root + "/port", encoding: .utf8))
                .flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
            usleep(20_000)
        }
        return port
    }

    /// The service's stderr and the reports it left.
    static func collect(_ root: String, into outcome: inout Outcome) {
        outcome.errors = (try? String(contentsOfFile: root + "/err", encoding: .utf8)) ?? ""
        let directory = root + "/reports"
        outcome.reportDirectory = directory
        outcome.reports = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [])
            .filter { $0.hasPrefix("stall-") && $0.hasSuffix(".json") }
            .compactMap { try? ReportReader.read(directory + "/" + $0) }
    }

    @Test("blocking async handlers (CPU, a blocking read, a held lock): each reported with its function and worker")
    func blockingHandlersAreReported() async throws {
        guard Self.service() != nil else { return }
        let outcome = try await offThePool {
            // Until the last request's report is written (after its stall ended; a loaded run takes longer than the
            // 300 ms that once sufficed): five final reports.
            try Self.run("monitor", paths: ["/fast", "/cpu", "/fast", "/sleep", "/fast", "/lock", "/fast",
                                            "/users/42/invoice", "/nope", "/fast", "/accounts/7/statement"],
                         until: { $0.reportsAfterStart.filter { !$0.ongoing }.count >= 5 })
        }
        guard outcome.started else {
            Issue.record("the service did not start: \(outcome.errors)")
            return
        }
        var measured: [String: (ms: Double, tid: Int32)] = [:]
        for line in outcome.measured.split(separator: "\n") {
            let parts = line.split(separator: " ")
            if parts.count == 4, let ms = Double(parts[2]), let tid = Int32(parts[3]) { measured[String(parts[1])] = (ms, tid) }
        }
        let reports = outcome.reportsAfterStart
        #expect(reports.count == 5, "one per blocking handler, none for an unknown route: \(reports.map { $0.topFrame?.symbol ?? "-" }) \(outcome.errors)")
        for (name, function, route) in [("cpu", "Handlers.renderInvoice", "GET /cpu"),
                                        ("sleep", "Handlers.readLegacyFile", "GET /sleep"),
                                        ("lock", "Handlers.updateLedger", "GET /lock"),
                                        ("invoice", "Handlers.renderInvoice", "GET /users/{id}/invoice"),
                                        ("statement", "Handlers.renderInvoice", "GET /accounts/{id}/statement")] {
            guard let handler = measured[name] else {
                Issue.record("the \(name) handler measured nothing: \(outcome.measured)")
                continue
            }
            let report = reports.first { $0.thread.tid == handler.tid && $0.topFrame?.symbol.contains(function) == true
                && ($0.durationMs - handler.ms) < 50 && $0.label == route }
                ?? reports.first { $0.topFrame?.symbol.contains(function) == true && $0.label == route }
            #expect(report != nil, "no report tops \(function): \(reports.map { $0.topFrame?.symbol ?? "-" })")
            #expect(report?.loop == "swift-global-executor")
            #expect(report?.thread.tid == handler.tid, "\(name): the worker that ran the handler")
            #expect(report?.job?.executor == "global")
            #expect(report?.label == route, "\(name): labelled with the route pattern by StallLabelMiddleware")
            #expect((report?.durationMs ?? 0) + (report?.frozenMs ?? 0) >= handler.ms - 0.05,
                    "\(name): the job holds the handler (\(report?.durationSource ?? "-"), frozen \(report?.frozenMs ?? 0) ms)")
            if name == "lock" {
                #expect(report?.waitingOn?.first?.holderName == "ledger-writer", "the lock's holder named")
            }
            if name == "statement", let report {
                Self.expectAwaitChain(report)
            }
        }
    }

    @Test("traced (TracingMiddleware before StallLabelMiddleware): the report and its OTLP log record carry the request's trace, as the tracer exported it")
    func tracedRequestsCarryTheirTrace() async throws {
        guard Self.service() != nil else { return }
        let route = "GET /accounts/{id}/statement"
        let outcome = try await offThePool {
            try Self.run("monitor", paths: ["/accounts/7/statement", "/fast"],
                         environment: ["STALL_SERVICE_TRACING": "1"],
                         until: { $0.reports.contains { $0.label == route && !$0.ongoing } })
        }
        #expect(outcome.started, "\(outcome.errors)")
        let report = try #require(outcome.reports.first { $0.label == route && !$0.ongoing },
                                  "\(outcome.reports.map { ($0.label, $0.ongoing) })")
        let traceId = try #require(report.traceId, "the report carries the request's trace")
        // `span NAME TRACE_ID SPAN_ID`: the request's server span, as the tracer finished ("exported") it.
        let spans = outcome.spans.split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
        let span = spans.first { $0.count == 4 && $0[2] == traceId }
        #expect(span != nil, "a trace the tracer exported: \(traceId) among \(spans)")
        #expect(span?[3] == report.spanId, "the request's span, current when the label's scope began")
        #expect(spans.count >= 2 && Set(spans.map { $0.count == 4 ? $0[2] : "" }).count == spans.count,
                "each request a trace of its own: \(spans)")

        // The same report uploaded as OTLP by `stallmon upload`, decoded by the official opentelemetry-proto.
        let receiver = try Receiver()
        let spool = makeTemporaryDirectory("hummingbird-traced-spool")
        let name = try #require(try FileManager.default.contentsOfDirectory(atPath: outcome.reportDirectory)
            .first { $0.hasPrefix("stall-") && (try? ReportReader.read(outcome.reportDirectory + "/" + $0))?.id == report.id })
        try FileManager.default.copyItem(atPath: outcome.reportDirectory + "/" + name, toPath: spool + "/" + name)
        try Spool(reportDirectory: spool).enqueue(reportPath: spool + "/" + name)
        let status = ChildProcess.run(try StallmonExecutable.url().path,
                                      ["upload", spool, "--endpoint", receiver.baseURL, "--once", "--deadline", "20"],
                                      environment: StallmonExecutable.environment())
        #expect(status == 0)
        let record = try #require(receiver.requests.first?.records?.first, "\(receiver.requests)")
        #expect(record["@trace_id"] == .string(traceId), "the log record's trace_id")
        #expect(record["@span_id"] == report.spanId.map(AnyJSON.string))
    }

    /// The statement route awaits through two layers of the service before it blocks: its stack continues past the
    /// innermost one's frame through the other, marked async, to the route's closure.
    static func expectAwaitChain(_ report: StallReport) {
        let frames = (report.hottestStack?.frames ?? []).compactMap {
            report.frames.indices.contains($0) ? report.frames[$0] : nil
        }
        let described = frames.map { ($0.async == true ? "[async] " : "") + ($0.symbol ?? "?") }
        let innermost = frames.lastIndex { $0.async != true && $0.symbol?.contains("StatementStore.render") == true }
        let layer = frames.firstIndex { $0.async == true && $0.symbol?.contains("AccountService.statement") == true }
        let route = frames.firstIndex { $0.async == true && $0.symbol?.contains("Service.main") == true }
        #expect(innermost != nil && layer != nil && route != nil, "\(described)")
        if let innermost, let layer, let route {
            #expect(innermost < layer && layer < route, "in await order: \(described)")
            #expect(frames[route].symbol?.contains("closure") == true, "the route's closure: \(described)")
            #expect(frames[layer].line != nil && frames[route].line != nil, "where each resumes")
        }
    }

    @Test("every worker held by a blocking handler, requests queued behind: one starvation report, each culprit labelled with its route")
    func starvationNamesTheRoutes() async throws {
        guard Self.service() != nil else { return }
        let workers = ProcessInfo.processInfo.activeProcessorCount
        /// One run: the reports, and how long the fastest queued `/fast` request took.
        func starve() async throws -> (outcome: Outcome, fastestQueuedMs: Double) {
            let fastest = Mutex<Double>(.infinity)
            let outcome = try await offThePool {
                try Self.run("monitor", paths: ["/fast"], traffic: { port in
                    // Threads of their own, not this process's Dispatch pool, which the suite's other tests keep
                    // busy: the blocking requests must really be in flight at once.
                    let done = DispatchSemaphore(value: 0)
                    for index in 0..<(workers + 4) {
                        // The blocking requests first (600 ms: room for a watchdog slowed down by a loaded machine),
                        // the fast ones just behind them.
                        if index == workers { usleep(30_000) }
                        let path = index < workers ? "/sleep?ms=600" : "/fast"
                        Thread.detachNewThread {
                            let sent = cstallmon_monotonic_ns()
                            _ = Self.get(path, port: port)
                            let took = Double(cstallmon_monotonic_ns() - sent) / 1e6
                            if index >= workers { fastest.withLock { $0 = min($0, took) } }
                            done.signal()
                        }
                    }
                    for _ in 0..<(workers + 4) { done.wait() }
                }, until: { $0.reportsAfterStart.contains { $0.kind == "starvation" } })
            }
            return (outcome, fastest.withLock { $0 })
        }
        var (outcome, fastestQueuedMs) = try await starve()
        if fastestQueuedMs < 400 && !outcome.reports.contains(where: { $0.kind == "starvation" }) {
            // A queued request was answered while every worker slept: libdispatch added a thread (it checks about
            // once a second for a queue with work and no runnable worker), so the pool was never starved. Once more.
            print("starvationNamesTheRoutes: a /fast request took \(fastestQueuedMs) ms, the pool grew; once more")
            (outcome, fastestQueuedMs) = try await starve()
        }
        guard outcome.started else {
            Issue.record("the service did not start: \(outcome.errors)")
            return
        }
        let starved = outcome.reportsAfterStart.filter { $0.kind == "starvation" }
        #expect(starved.count == 1, "\(outcome.reports.map { ($0.kind ?? "stall", $0.label) })")
        let starvation = try #require(starved.first?.starvation)
        #expect(starvation.culprits.count == workers)
        #expect(starvation.culprits.allSatisfy { $0.label == "GET /sleep" }, "\(starvation.culprits.map(\.label))")
        #expect(starvation.culprits.allSatisfy { $0.topFrame?.symbol.contains("Handlers.readLegacyFile") == true })
        // How many jobs waited depends on Hummingbird's own structure (its accept loop makes a connection's task only
        // once it runs itself); a job waited at least the threshold in any case, if only stallmon's canary.
        #expect(starvation.oldestWaitMs >= 100, "\(starvation)")
        #expect(starved.first?.label == "GET /sleep", "the report's label is its first culprit's")
    }

    /// SIGTERM 0.4 s into a blocking handler of `milliseconds`: the service drains it, then exits. `mode` is the
    /// wiring: the README's (`StallMonitorService(…, watching: [app])`) or the one the README once had (the monitor
    /// listed after the application, so a `ServiceGroup`, shutting down in reverse order, stopped it first).
    static func drain(_ mode: String, milliseconds: Int = 1500) throws
        -> (outcome: Outcome, handlerMs: Double?, signal: Int32?) {
        let (root, child) = try launch(mode)
        defer { child.kill() }
        var outcome = Outcome()
        guard let port = port(of: child, root: root) else { return (outcome, nil, nil) }
        outcome.started = true
        let answered = DispatchSemaphore(value: 0)
        let body = Mutex<String?>(nil)
        let stallBegins = {
            ((try? String(contentsOfFile: root + "/reports/events.jsonl", encoding: .utf8)) ?? "")
                .split(separator: "\n").filter { $0.contains("\"stall.begin\"") }.count
        }
        let beforeTheRequest = stallBegins()  // start-up's, if any
        Thread.detachNewThread {
            body.withLock { $0 = Self.get("/sleep?ms=\(milliseconds)", port: port) }
            answered.signal()
        }
        // SIGTERM once the handler is known to stall (a stall.begin after the request was sent), not at a fixed time
        // after sending: a loaded machine may not have read the request by then.
        _ = eventually(timeout: .seconds(10)) { stallBegins() > beforeTheRequest }
        _ = Glibc.kill(child.pid, SIGTERM)
        _ = answered.wait(timeout: .now() + 10)
        _ = child.wait(timeout: .seconds(15))
        outcome.exitCode = child.exitCode
        collect(root, into: &outcome)
        let handlerMs = body.withLock { $0 } == "legacy" ? Double(milliseconds) : nil
        return (outcome, handlerMs, child.terminatingSignal)
    }

    @Test("SIGTERM during a stall, wired as the README says: the drain is watched to the end, the report is final")
    func sigtermDuringAStallIsWatchedToTheEnd() async throws {
        guard Self.service() != nil else { return }
        let run = try await offThePool { try Self.drain("service-group") }
        #expect(run.outcome.started, "\(run.outcome.errors)")
        #expect(run.handlerMs != nil, "the request in flight was answered during the drain")
        #expect(run.outcome.exitCode == 0 && run.signal == nil, "exited by itself after the drain: \(run.outcome.errors)")
        #expect(run.outcome.errors.contains("drained"))
        let report = try #require(run.outcome.reports.first { $0.topFrame?.symbol.contains("Handlers.readLegacyFile") == true },
                                  "\(run.outcome.reports.map { ($0.topFrame?.symbol ?? "-", $0.durationMs, $0.ongoing) })")
        #expect(!report.ongoing, "the stall ended while the monitor watched")
        #expect(report.durationMs >= 1_495, "the full 1.5 s: \(report.durationMs) ms")
    }

    @Test("the wiring the README once had (monitor listed last): stopped first, the stall cut short as ongoing")
    func theMonitorListedLastIsStoppedFirst() async throws {
        guard Self.service() != nil else { return }
        // A 3 s stall: the monitor must be seen stopped before its end, and how soon the service group stops it after
        // SIGTERM is the machine's business (a loaded fresh clone once took over 1.1 s).
        let run = try await offThePool { try Self.drain("service-group-last", milliseconds: 3000) }
        #expect(run.outcome.started, "\(run.outcome.errors)")
        let report = try #require(run.outcome.reports.first { $0.topFrame?.symbol.contains("Handlers.readLegacyFile") == true },
                                  "\(run.outcome.reports.map { ($0.topFrame?.symbol ?? "-", $0.durationMs, $0.ongoing) })")
        #expect(report.ongoing, "written as ongoing when the monitor stopped, before the drain ended")
        // Cut short: the 3 s stall's end never seen. (No tighter bound: SIGTERM comes 400 ms into it, and how soon the
        // service group stops the monitor after that is the machine's business; loaded runs took 650 ms and 1.1 s.)
        #expect(report.durationMs < 2_995, "\(report.durationMs) ms")
    }

    @Test("the documented Hummingbird middleware is the one this service compiles, verbatim")
    func readmeMiddlewareIsCompiled() throws {
        let problems = try DocumentedSnippets.problems(
            ofSnippetImporting: "Hummingbird", compiledIn: "Tests/HummingbirdService/Sources/StallLabelMiddleware.swift",
            repository: BuiltByTestScript.repository)
        #expect(problems.isEmpty, "\(problems)")
    }

    @Test("the global executor's hook already taken by NIO's executor take-over: the documented error")
    func hookTakenByNIO() async throws {
        guard Self.service() != nil else { return }
        let outcome = try await offThePool { try Self.run("nio-takeover", paths: [], waitForExit: true) }
        #expect(outcome.exitCode == 3, "\(outcome.errors)")
        #expect(outcome.errors.contains("swift_task_enqueueGlobal_hook) is already taken"), "\(outcome.errors)")
    }
}
