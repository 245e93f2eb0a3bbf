import Foundation
import Logging
@testable import Stallmon
@testable import StallmonReport
import StallmonTestSupport
@testable import StallmonUpload
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `stallmon upload`: end to end against the scripted collector on 127.0.0.1.
@Suite("stallmon upload", .serialized)
struct UploadCommandTests {
    /// Writes `count` reports into a new report directory and spools them; returns the directory and the ids.
    static func spooled(_ count: Int) throws -> (TemporaryDirectory, [String]) {
        let directory = try TemporaryDirectory("stallmon-upload")
        let spool = Spool(reportDirectory: directory.path)
        var ids: [String] = []
        for index in 0..<count {
            let report = Fixture.report(durationMs: 120 + Double(index), topSymbol: "App.Worker.step\(index)()",
                                        start: Fixture.start(index))
            let path = try Fixture.write(report, named: "stall-\(String(format: "%04d", index)).json", in: directory)
            try spool.enqueue(reportPath: path)
            ids.append(report.id)
        }
        return (directory, ids)
    }

    static let fast = ["STALLMON_UPLOAD_BATCH_MAX_REPORTS": "5", "STALLMON_UPLOAD_BATCH_MAX_AGE_MS": "0",
                       "STALLMON_UPLOAD_BACKOFF_MS": "50", "STALLMON_UPLOAD_BACKOFF_MAX_MS": "200",
                       "STALLMON_UPLOAD_TIMEOUT_MS": "2000"]

    /// A request timeout longer than the receiver's scripted hang, so the hung request stays in flight.
    static let slowRequests = fast.merging(["STALLMON_UPLOAD_TIMEOUT_MS": "120000"]) { $1 }

    @Test("--once delivers everything, gzip and OTLP, and exits 0 with an empty spool")
    func onceDeliversEverything() async throws {
        let receiver = try Receiver()
        let (directory, ids) = try Self.spooled(12)
        defer { directory.remove() }
        let result = try await CLI.run(["upload", directory.path, "--endpoint", receiver.baseURL, "--once"],
                                       environment: Self.fast.merging(["STALLMON_UPLOAD_TOKEN": "t0ken"]) { $1 })
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout.contains("delivered 12"), "\(result)")
        #expect(receiver.acknowledgedIDs.sorted() == ids.sorted())
        #expect(receiver.requests.allSatisfy { $0.parse_error == nil && $0.authorization == "Bearer t0ken" })
        #expect(!result.stdout.contains("t0ken") && !result.stderr.contains("t0ken"))
        #expect(try Spool(reportDirectory: directory.path).pending().isEmpty)
    }

    @Test("SIGKILL mid-batch, restart: nothing lost, no file corrupt, no report under a new id")
    func sigkillMidBatchThenRestart() async throws {
        // The first request hangs long enough to be killed in flight, however late this test's polling wakes up on a
        // loaded machine (with 4 s it was once answered, and its batch rightly deleted, before the kill); later ones
        // succeed (the receiver answers each request on a thread of its own).
        let receiver = try Receiver(plan: #"[{"sleep":60,"status":200}]"#)
        let (directory, ids) = try Self.spooled(14)
        defer { directory.remove() }
        let daemon = try RunningCLI(["upload", directory.path, "--endpoint", receiver.baseURL, "--daemon"],
                                    environment: Self.slowRequests)
        defer { daemon.cleanUp() }
        let deadline = ContinuousClock.now.advanced(by: .seconds(10))
        while receiver.arrivals == 0 && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(receiver.arrivals == 1, "the daemon's first batch is in flight: \(daemon.stderr)")
        daemon.terminate()  // SIGKILL while that batch is in flight

        let spool = Spool(reportDirectory: directory.path)
        let pending = try spool.pending()
        #expect(pending.count == 14, "nothing was acknowledged to the killed daemon, so nothing was deleted")
        for entry in pending {
            #expect(throws: Never.self) { _ = try ReportReader.read(spool.pendingDirectory + "/" + entry.name) }
        }
        let restart = try await CLI.run(["upload", directory.path, "--endpoint", receiver.baseURL, "--once"],
                                        environment: Self.fast)
        #expect(restart.status == 0, "\(restart)")
        let received = receiver.requests.flatMap { $0.ids ?? [] }
        #expect(Set(received) == Set(ids), "every report arrived, and only under its own id")
        #expect(Set(receiver.acknowledgedIDs).isSuperset(of: ids))
        #expect(received.count - ids.count <= 5, "at most the batch in flight was sent twice (same ids)")
        #expect(try spool.pending().isEmpty)
    }

    /// A sidecar `stallmon upload --daemon` and an in-process uploader on one spool: they take turns (an advisory
    /// lock on the spool), so every report is delivered and none is sent by both.
    @Test("an in-process uploader and a sidecar daemon on one spool never send the same report")
    func inProcessUploaderAndSidecarShareASpool() async throws {
        // Requests slow enough (0.1 s) that the daemon's batches leave the in-process uploader its turns even on a
        // loaded machine (with 0.05 s it once found the daemon done before its first try).
        let plan = "[" + Array(repeating: #"{"sleep":0.1,"status":200}"#, count: 40).joined(separator: ",") + "]"
        let receiver = try Receiver(plan: plan)
        let (directory, ids) = try Self.spooled(60)
        defer { directory.remove() }
        let daemon = try RunningCLI(["upload", directory.path, "--endpoint", receiver.baseURL, "--daemon"],
                                    environment: Self.fast)
        defer { daemon.cleanUp() }
        var configuration = UploadConfiguration()
        configuration.endpoint = receiver.baseURL
        configuration.batchMaxReports = 5
        configuration.batchMaxAge = .zero
        configuration.backoffBase = .milliseconds(50)
        configuration.backoffMax = .milliseconds(200)
        let inProcess = try Uploader(spool: Spool(reportDirectory: directory.path), configuration: configuration,
                                     logger: Logger(label: "test"))
        inProcess.start()
        let deadline = ContinuousClock.now.advanced(by: .seconds(30))
        while Set(receiver.acknowledgedIDs).count < ids.count && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
        }
        inProcess.stop(deadline: .seconds(1))
        daemon.terminate()
        let received = receiver.requests.flatMap { $0.ids ?? [] }
        #expect(Set(received) == Set(ids), "every report delivered")
        #expect(received.count == ids.count, "none sent twice: \(received.count) records for \(ids.count) reports")
        // Whether the in-process uploader got a turn is left to timing (the spool's lock is no queue: on a loaded
        // machine the daemon may take every batch); what must hold is above: all delivered, none twice.
        print("in-process uploader delivered \(inProcess.statistics.delivered) of \(ids.count)")
        #expect(try Spool(reportDirectory: directory.path).pending().isEmpty)
    }

    @Test("--daemon: SIGTERM abandons a slow request within the deadline, exits 0 and keeps the reports")
    func daemonGracefulShutdown() async throws {
        // The request would take a minute: a daemon that waited it out instead of abandoning it at its 1 s deadline
        // is still running when the wait below gives up. (No bound on how fast it exits: a loaded machine took 4.2 s.)
        let receiver = try Receiver(plan: #"[{"sleep":60,"status":200}]"#)
        let (directory, _) = try Self.spooled(3)
        defer { directory.remove() }
        let daemon = try RunningCLI(["upload", directory.path, "--endpoint", receiver.baseURL, "--daemon",
                                     "--deadline", "1"], environment: Self.slowRequests)
        defer { daemon.cleanUp() }
        let deadline = ContinuousClock.now.advanced(by: .seconds(10))
        while receiver.arrivals == 0 && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        try #require(receiver.arrivals == 1, "the request is in flight when SIGTERM comes")
        kill(daemon.process.processIdentifier, SIGTERM)
        let exited = await daemon.waitForExit(timeout: .seconds(30))
        #expect(exited, "exits on SIGTERM, abandoning the request in flight: \(daemon.stderr)")
        #expect(daemon.process.terminationStatus == 0)
        #expect(try Spool(reportDirectory: directory.path).pending().count == 3, "the unacknowledged batch is kept")
        #expect(daemon.stderr.contains("pending 3"), "\(daemon.stderr)")
    }

    /// SIGTERM while the daemon is still starting (libraries initializing, configuration not yet read) stays pending
    /// until it is ready to stop cleanly: exit 0, never death by the signal (the field report: 5–15 ms after start
    /// died every time). The signal is sent 0–10 ms after the process has blocked it, which its .preinit_array
    /// function does before any library initializer; before that the kernel and the dynamic loader are still mapping
    /// the program and no code of ours can run (README, "The CLI").
    @Test("--daemon: SIGTERM during start-up still exits 0")
    func daemonSigtermDuringStartup() async throws {
        let (directory, _) = try Self.spooled(1)
        defer { directory.remove() }
        let executable = try StallmonExecutable.url().path
        let path = directory.path
        // (blocked before main, exited, exit code, description) per try; run off the cooperative pool.
        let outcomes = try await offThePool { () throws -> [(Bool, Bool, Int32?, String)] in
            var outcomes: [(Bool, Bool, Int32?, String)] = []
            for attempt in 0..<25 {
                let delayMicroseconds = [0, 1_000, 3_000, 6_000, 10_000][attempt % 5]
                let child = try ChildProcess(executable, ["upload", path, "--endpoint", "http://127.0.0.1:9",
                                                          "--daemon", "--deadline", "1"],
                                             environment: StallmonExecutable.environment([:]))
                let spawned = ContinuousClock.now
                while !Self.blocksSIGTERM(child.pid) && ContinuousClock.now < spawned.advanced(by: .seconds(2)) {}
                let blocked = Self.blocksSIGTERM(child.pid)
                if delayMicroseconds > 0 { usleep(useconds_t(delayMicroseconds)) }
                kill(child.pid, SIGTERM)
                let exited = child.wait(timeout: .seconds(10))
                if !exited { child.kill() }
                outcomes.append((blocked, exited, child.exitCode,
                                 "\(delayMicroseconds / 1000) ms: exit \(child.exitCode.map(String.init) ?? "-"), "
                                    + "signal \(child.terminatingSignal.map(String.init) ?? "-")"))
            }
            return outcomes
        }
        for (blocked, exited, code, description) in outcomes {
            #expect(blocked, "SIGTERM blocked before main: \(description)")
            #expect(exited && code == 0, "\(description)")
        }
        print("upload --daemon SIGTERM during start-up: \(outcomes.map(\.3).joined(separator: "; "))")
    }

    /// Whether `pid`'s SigBlk in /proc has SIGTERM.
    static func blocksSIGTERM(_ pid: pid_t) -> Bool {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("SigBlk:") }),
              let mask = UInt64(line.dropFirst("SigBlk:".count).trimmingCharacters(in: .whitespaces), radix: 16)
        else { return false }
        return mask & (1 << UInt64(SIGTERM - 1)) != 0
    }

    @Test("an unreachable endpoint: --once exits 1, keeps every report, and logs the failure once")
    func unreachableEndpoint() async throws {
        let (directory, _) = try Self.spooled(3)
        defer { directory.remove() }
        let result = try await CLI.run(["upload", directory.path, "--endpoint", "http://127.0.0.1:9", "--once",
                                        "--deadline", "1.5"],
                                       environment: Self.fast.merging(["STALLMON_UPLOAD_TIMEOUT_MS": "300",
                                                                       "STALLMON_UPLOAD_TOKEN": "supersecret"]) { $1 })
        #expect(result.status == 1, "\(result)")
        #expect(result.stdout.contains("pending 3"), "\(result)")
        #expect(result.stderr.components(separatedBy: "upload failed").count - 1 == 1, "\(result.stderr)")
        #expect(!result.stderr.contains("supersecret") && !result.stdout.contains("supersecret"))
        #expect(try Spool(reportDirectory: directory.path).pending().count == 3)
    }

    @Test("bad input is refused before any work", arguments: [
        (["--endpoint", "not a url"], [String: String](), "upload_endpoint"),
        (["--endpoint", "ftp://host/x"], [:], "http:// or https://"),
        (["--endpoint", "http://127.0.0.1:9", "--format", "xml"], [:], "unknown --format xml"),
        (["--endpoint", "http://127.0.0.1:9"], ["STALLMON_UPLOAD_TOKEN_FILE": "/nonexistent/token"],
         "cannot read upload_token_file /nonexistent/token"),
        (["--endpoint", "http://127.0.0.1:9"], ["STALLMON_UPLOAD_FORMAT": "protobuf"], "upload_format"),
        ([], [:], "no upload_endpoint configured"),
    ])
    func badInput(arguments: [String], environment: [String: String], mentioned: String) async throws {
        let (directory, _) = try Self.spooled(1)
        defer { directory.remove() }
        let result = try await CLI.run(["upload", directory.path, "--once"] + arguments, environment: environment)
        #expect(result.status == 64, "\(result)")
        #expect(result.stderr.contains(mentioned), "\(result.stderr)")
        #expect(try Spool(reportDirectory: directory.path).pending().count == 1, "nothing was touched")
    }

    /// Issue 32 (1): as root, `stallmon upload <link>/` (a trailing slash) followed another user's link to a root-only
    /// spool, sent both reports and deleted them; a link further up the path was resolved and never examined.
    @Test("a path through another user's symbolic link is refused, trailing slash or not; nothing is read or sent",
          .enabled(if: TestEnvironment.isRoot, "planting a link as a second user needs root (lchown)"))
    func aPathThroughAnotherUsersLinkIsRefused() async throws {
        let receiver = try Receiver()
        let (directory, _) = try Self.spooled(2)
        defer { directory.remove() }
        chmod(directory.path, 0o700)  // root's own, root-only
        let shared = try TemporaryDirectory("stallmon-shared")
        defer { shared.remove() }
        chmod(shared.path, 0o1777)  // like /var/tmp: anyone may create entries, nobody may rename another's
        let nobody: uid_t = 65534
        let link = shared.path("evil-link")  // to the spool's directory itself
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: directory.path)
        lchown(link, nobody, nobody)
        let parentLink = shared.path("app")  // to the directory above it: the link is an intermediate component
        try FileManager.default.createSymbolicLink(atPath: parentLink,
                                                   withDestinationPath: AtomicFile.parentDirectory(of: directory.path))
        lchown(parentLink, nobody, nobody)
        let name = directory.url.lastPathComponent
        for path in [link, link + "/", link + "//.", parentLink + "/" + name, parentLink + "/" + name + "/"] {
            let result = try await CLI.run(["upload", path, "--endpoint", receiver.baseURL, "--once"],
                                           environment: Self.fast)
            #expect(result.status == 1, "\(path): \(result)")
            #expect(result.stderr.contains("refusing untrusted directory \(path)"), "\(path): \(result.stderr)")
            #expect(result.stderr.contains("uid 65534"), "names the link's owner: \(result.stderr)")
            #expect(!result.stdout.contains("delivered"), "\(path): \(result)")
        }
        #expect(receiver.arrivals == 0, "nothing was sent")
        #expect(try Spool(reportDirectory: directory.path).pending().count == 2, "nothing was deleted")
    }
}
