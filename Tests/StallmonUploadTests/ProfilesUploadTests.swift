import Foundation
import InMemoryLogging
import Logging
@testable import Stallmon
@testable import StallmonReport
import StallmonTestSupport
@testable import StallmonUpload
import Testing

/// `upload_signals = logs,profiles`: each batch also goes as OTLP profiles (`/v1development/profiles`, protobuf),
/// decoded by the receiver with the official opentelemetry-proto package, and leaves the spool only once both were
/// acknowledged.
@Suite(.serialized)
struct ProfilesUploadTests {
    static func configuration(_ endpoint: String, signals: Set<UploadSignal> = [.logs, .profiles])
        -> UploadConfiguration {
        var configuration = testUploadConfiguration(endpoint)
        configuration.signals = signals
        return configuration
    }

    /// `sampleReport`: two ok samples of one stack, `[MyService.handle(request:), main]`.
    static func spoolTracedReports(_ count: Int, into directory: String) throws -> [StallReport] {
        let spool = Spool(reportDirectory: directory)
        var reports: [StallReport] = []
        for index in 0..<count {
            var report = sampleReport(durationMs: 200 + Double(index))
            report.stallClass = .blocked
            report.signature = "0123456789abcdef"
            if index == 0 {
                report.traceId = "4bf92f3577b34da6a3ce929d0e0e4736"
                report.spanId = "00f067aa0ba902b7"
            }
            let path = "\(directory)/stall-2026112\(String(format: "%05d", index))-\(report.id.prefix(8)).json"
            try AtomicFile.write(Array(try JSONEncoder().encode(report)), to: path)
            try spool.enqueue(reportPath: path)
            reports.append(report)
        }
        return reports
    }

    @Test func eachBatchGoesAsProfilesAndLogsAndTheOfficialPackageDecodesTheProfiles() throws {
        let receiver = try Receiver()
        let directory = makeTemporaryDirectory()
        let reports = try Self.spoolTracedReports(3, into: directory)
        let uploader = try Uploader(spool: Spool(reportDirectory: directory),
                                    configuration: Self.configuration(receiver.baseURL + "/v1/logs"),
                                    logger: Logger(label: "test"))
        let statistics = uploader.flush(deadline: .seconds(20))
        #expect(statistics.delivered == 3 && statistics.pending == 0)
        let requests = receiver.requests
        #expect(requests.map(\.path) == ["/v1development/profiles", "/v1/logs"], "profiles first, then logs")
        let profilesRequest = try #require(requests.first)
        #expect(profilesRequest.parse_error == nil, "\(profilesRequest.parse_error ?? "")")
        #expect(profilesRequest.content_type == "application/x-protobuf" && profilesRequest.content_encoding == "gzip")
        #expect(profilesRequest.authorization == "Bearer s3cret-token" && profilesRequest.custom == "team-a")
        let resource = try #require(profilesRequest.resources?.first)
        #expect(resource["service.name"] == .object(["stringValue": .string("myservice")]))
        #expect(resource["process.executable.build_id.gnu"] == .object(["stringValue": .string("abcdef0123")]))
        let profiles = try #require(profilesRequest.profiles)
        #expect(profiles.map { $0["type"] } == [.string("stall_time"), .string("stalls")])
        guard case .array(let samples) = profiles[0]["samples"] else {
            Issue.record("no samples: \(profiles[0])")
            return
        }
        #expect(samples.count == 3, "one stack per stall")
        var total = 0.0
        for case .object(let sample) in samples {
            guard case .array(let values) = sample["values"], case .number(let value) = values.first else { continue }
            total += value
            #expect(sample["functions"] == .array([.string("MyService.handle(request:) @ /src/Handler.swift:42"),
                                                   .string("main")]), "\(sample)")
            #expect(sample["attributes"] == .object([
                "stallmon.loop": .string("main"), "stallmon.stall.class": .string("blocked"),
                "stallmon.label": .string("request"), "stallmon.stall.signature": .string("0123456789abcdef"),
            ]), "\(sample)")
            let start = WallTime.unixNanoseconds(reports[0].start.wall)!
            #expect(sample["timestamps"] == .array([.string(String(start))]))
        }
        #expect(total == 603_000_000, "each stall's whole duration, in nanoseconds")
        let traced = samples.filter { if case .object(let sample) = $0 { sample["span_id"] != .string("") } else { false } }
        #expect(traced == [samples[0]])
        if case .object(let first) = samples[0] {
            #expect(first["trace_id"] == .string("4bf92f3577b34da6a3ce929d0e0e4736"))
            #expect(first["span_id"] == .string("00f067aa0ba902b7"))
        }
    }

    @Test func logsThatFailAfterTheProfilesWentThroughAreRetriedWithoutSendingTheProfilesTwice() throws {
        let receiver = try Receiver(plan: #"[{"status":200},{"status":503},{"status":200}]"#)
        let directory = makeTemporaryDirectory()
        let reports = try Self.spoolTracedReports(2, into: directory)
        let uploader = try Uploader(spool: Spool(reportDirectory: directory),
                                    configuration: Self.configuration(receiver.baseURL), logger: Logger(label: "test"))
        let statistics = uploader.flush(deadline: .seconds(20))
        #expect(statistics.delivered == 2 && statistics.pending == 0 && statistics.retryableFailures == 1)
        #expect(receiver.requests.map(\.path) == ["/v1development/profiles", "/v1/logs", "/v1/logs"])
        #expect(Set(receiver.acknowledgedIDs) == Set(reports.map(\.id)))
    }

    @Test func aBatchStaysInTheSpoolUntilItsProfilesAreAcknowledged() throws {
        let receiver = try Receiver(plan: #"[{"status":503},{"reset":true}]"#)
        let directory = makeTemporaryDirectory()
        _ = try Self.spoolTracedReports(2, into: directory)
        let uploader = try Uploader(spool: Spool(reportDirectory: directory),
                                    configuration: Self.configuration(receiver.baseURL), logger: Logger(label: "test"))
        let statistics = uploader.flush(deadline: .seconds(20))
        #expect(statistics.delivered == 2 && statistics.retryableFailures == 2)
        #expect(receiver.requests.map(\.path)
                == ["/v1development/profiles", "/v1development/profiles", "/v1development/profiles", "/v1/logs"],
                "no log is sent before the profiles went through")
    }

    /// A collector without a profiles pipeline refuses them for good: the logs still go, the profiles are dropped
    /// and counted, and the batch is not moved to rejected/.
    @Test func refusedProfilesDoNotHoldBackTheLogs() throws {
        let receiver = try Receiver(plan: #"[{"status":400,"body":"no profiles here"}]"#)
        let directory = makeTemporaryDirectory()
        let reports = try Self.spoolTracedReports(2, into: directory)
        let logs = InMemoryLogHandler()
        let spool = Spool(reportDirectory: directory)
        let uploader = try Uploader(spool: spool, configuration: Self.configuration(receiver.baseURL),
                                    logger: Logger(label: "test") { _ in logs })
        let statistics = uploader.flush(deadline: .seconds(20))
        #expect(statistics.delivered == 2 && statistics.profilesRefused == 2 && statistics.rejected == 0)
        #expect(spool.rejected().isEmpty)
        #expect(Set(receiver.acknowledgedIDs) == Set(reports.map(\.id)))
        #expect(logs.entries.contains { $0.level == .error && "\($0.metadata)".contains("no profiles here") })
    }

    @Test func profilesAloneAreDeletedOnTheirAcknowledgementAndRefusedOnesMoveToRejected() throws {
        let receiver = try Receiver(plan: #"[{"status":200},{"status":400}]"#)
        let directory = makeTemporaryDirectory()
        _ = try Self.spoolTracedReports(12, into: directory)
        let spool = Spool(reportDirectory: directory)
        let uploader = try Uploader(spool: spool, configuration: Self.configuration(receiver.baseURL,
                                                                                    signals: [.profiles]),
                                    logger: Logger(label: "test"))
        let statistics = uploader.flush(deadline: .seconds(20))
        #expect(statistics.delivered == 10 && statistics.rejected == 2 && statistics.pending == 0)
        #expect(receiver.requests.allSatisfy { $0.path == "/v1development/profiles" })
        #expect(spool.rejected().count == 2)
    }

    @Test func aPartialSuccessOfProfilesIsCounted() throws {
        let receiver = try Receiver(plan: #"[{"status":200,"partial":1}]"#)
        let directory = makeTemporaryDirectory()
        _ = try Self.spoolTracedReports(1, into: directory)
        let uploader = try Uploader(spool: Spool(reportDirectory: directory),
                                    configuration: Self.configuration(receiver.baseURL), logger: Logger(label: "test"))
        let statistics = uploader.flush(deadline: .seconds(20))
        #expect(statistics.delivered == 1 && statistics.partiallyRejectedRecords == 1)
    }

    /// An interim report is replaced by its final one under the same name, which is sent too: a profile store would
    /// count the stall twice. Interims go as logs only; a hang's report (ongoing, and maybe the last word) also as
    /// a profile.
    @Test func interimReportsGoAsLogsOnlyButHangsAsProfilesToo() throws {
        let receiver = try Receiver()
        let directory = makeTemporaryDirectory()
        let spool = Spool(reportDirectory: directory)
        var interim = sampleReport(durationMs: 2000)
        interim.ongoing = true
        var hang = sampleReport(durationMs: 30_000)
        hang.ongoing = true
        hang.hang = StallReport.Hang(action: "abort", afterMs: 30_000)
        let final = sampleReport(durationMs: 250)
        for (index, report) in [interim, hang, final].enumerated() {
            let path = "\(directory)/stall-2026112\(String(format: "%05d", index))-\(report.id.prefix(8)).json"
            try AtomicFile.write(Array(try JSONEncoder().encode(report)), to: path)
            try spool.enqueue(reportPath: path)
        }
        let uploader = try Uploader(spool: spool, configuration: Self.configuration(receiver.baseURL),
                                    logger: Logger(label: "test"))
        #expect(uploader.flush(deadline: .seconds(20)).delivered == 3)
        let requests = receiver.requests
        #expect(Set(receiver.acknowledgedIDs) == [interim.id, hang.id, final.id], "all three as logs")
        guard case .array(let samples)? = requests.first?.profiles?.first?["samples"] else {
            Issue.record("no profile: \(requests)")
            return
        }
        let total = samples.reduce(0.0) { total, sample in
            guard case .object(let sample) = sample, case .array(let values)? = sample["values"],
                  case .number(let value)? = values.first else { return total }
            return total + value
        }
        #expect(total == 30_250_000_000, "the hang and the final, not the interim")
    }

    @Test func theSignalsKeyIsParsedAndProfilesNeedOTLP() throws {
        #expect(UploadSignal.parseList("logs, profiles") == [.logs, .profiles])
        #expect(UploadSignal.parseList("PROFILES") == [.profiles])
        #expect(UploadSignal.parseList("") == nil && UploadSignal.parseList("logs,traces") == nil)
        var configuration = Self.configuration("http://127.0.0.1:1")
        configuration.format = .ndjson
        #expect(throws: ConfigurationError.self) { try configuration.validate() }
        #expect(UploadSignal.profilesURL(for: "http://c:4318/") == "http://c:4318/v1development/profiles")
        #expect(UploadSignal.profilesURL(for: "http://c:4318/v1/logs") == "http://c:4318/v1development/profiles")
    }
}
