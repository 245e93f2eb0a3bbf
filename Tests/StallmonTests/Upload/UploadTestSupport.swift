import Foundation
import Testing
@testable import Stallmon

/// The scripted Python collector (receiver.py) on 127.0.0.1, stopped when this object is released.
final class Receiver: @unchecked Sendable {
    let port: Int
    let logPath: String
    private let process: Process

    /// One request as the receiver saw it.
    struct Request: Decodable {
        var n: Int
        var time: Double
        var path: String
        var status: FlexibleStatus
        var ids: [String]?
        var parse_error: String?
        var content_encoding: String?
        var content_type: String?
        var authorization: String?
        var custom: String?
        var resources: [[String: AnyJSON]]?
    }

    init(plan: String = "[]") throws {
        let directory = makeTemporaryDirectory("receiver")
        logPath = directory + "/requests.jsonl"
        let portFile = directory + "/port"
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("receiver.py")
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script.path, "--port-file", portFile, "--log", logPath, "--plan", plan,
                             "--lifetime", "60"]
        try process.run()
        let started = eventually(timeout: .seconds(10)) { FileManager.default.fileExists(atPath: portFile) }
        guard started, let text = try? String(contentsOfFile: portFile, encoding: .utf8), let port = Int(text) else {
            process.terminate()
            throw ReceiverError(description: "receiver.py did not start (is opentelemetry-proto installed?)")
        }
        self.port = port
    }

    deinit {
        // SIGKILL: a child of the test process inherits its blocked SIGTERM.
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    var baseURL: String { "http://127.0.0.1:\(port)" }

    var requests: [Request] {
        guard let text = try? String(contentsOfFile: logPath, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { try? JSONDecoder().decode(Request.self, from: Data($0.utf8)) }
    }

    /// Ids the receiver acknowledged with a 2xx.
    var acknowledgedIDs: [String] {
        requests.filter { $0.status.code.map { (200..<300).contains($0) } ?? false }.flatMap { $0.ids ?? [] }
    }

    struct ReceiverError: Error, CustomStringConvertible {
        let description: String
    }
}

/// The receiver logs a numeric status, or "reset".
struct FlexibleStatus: Decodable {
    var code: Int?
    init(from decoder: Decoder) throws {
        code = try? decoder.singleValueContainer().decode(Int.self)
    }
}

/// Any JSON value (for fields the tests only look into loosely).
enum AnyJSON: Decodable, Equatable {
    case string(String), number(Double), bool(Bool), object([String: AnyJSON]), array([AnyJSON]), null
    init(from decoder: Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let value = try? container.decode(String.self) { self = .string(value) }
        else if let value = try? container.decode(Bool.self) { self = .bool(value) }
        else if let value = try? container.decode(Double.self) { self = .number(value) }
        else if let value = try? container.decode([String: AnyJSON].self) { self = .object(value) }
        else if let value = try? container.decode([AnyJSON].self) { self = .array(value) }
        else { self = .null }
    }
}

/// A plausible report with a fresh id, written into `directory` and spooled.
@discardableResult
func spoolSampleReports(_ count: Int, into directory: String, durationMs: Double = 150) throws -> [String] {
    let spool = Spool(reportDirectory: directory)
    var ids: [String] = []
    for index in 0..<count {
        let report = sampleReport(durationMs: durationMs + Double(index))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted]
        let path = "\(directory)/stall-2026112\(String(format: "%05d", index))-\(report.id.prefix(8)).json"
        try AtomicFile.write(Array(try encoder.encode(report)), to: path)
        try spool.enqueue(reportPath: path)
        ids.append(report.id)
    }
    return ids
}

func sampleReport(durationMs: Double, id: String = UUID().uuidString.lowercased()) -> StallReport {
    StallReport(
        schema: StallReport.currentSchema, id: id, ongoing: false,
        process: .init(pid: 4242, executable: "/usr/bin/myservice", buildId: "abcdef0123", hostname: "host-a"),
        thread: .init(tid: 4243, name: "main"), loop: "main", thresholdMs: 100,
        start: .init(wall: "2026-11-22T01:02:03.456Z", monotonicNs: 123_456_789),
        durationMs: durationMs, durationSource: "loop", label: "request",
        topFrame: .init(symbol: "MyService.handle(request:)", module: "/usr/bin/myservice", file: "/src/Handler.swift",
                        line: 42),
        captures: .init(attempted: 2, succeeded: 2, timedOut: 0, pauseMedianUs: 20, pauseMaxUs: 30),
        samples: [.init(offsetMs: 100, status: .ok, frames: [0, 1], truncated: false, label: "request"),
                  .init(offsetMs: 110, status: .ok, frames: [0, 1], truncated: false, label: "request")],
        frames: [.init(address: "0x1000", image: 0, module: "/usr/bin/myservice", buildId: "abcdef0123",
                       offset: "0x1000", symbol: "MyService.handle(request:)", symbolOffset: 16,
                       file: "/src/Handler.swift", line: 42, inApp: true),
                 .init(address: "0x2000", image: 0, module: "/usr/bin/myservice", buildId: "abcdef0123",
                       offset: "0x1fff", symbol: "main", symbolOffset: 8, file: nil, line: nil, inApp: true)],
        images: [.init(path: "/usr/bin/myservice", buildId: "abcdef0123", loadBias: "0x0", start: "0x0",
                       end: "0x10000")])
}

/// A fast-retrying upload configuration against `endpoint`.
func testUploadConfiguration(_ endpoint: String, format: UploadFormat = .otlp) -> UploadConfiguration {
    var configuration = UploadConfiguration()
    configuration.endpoint = endpoint
    configuration.format = format
    configuration.batchMaxReports = 10
    configuration.batchMaxAge = .zero
    configuration.requestTimeout = .seconds(2)
    configuration.backoffBase = .milliseconds(50)
    configuration.backoffMax = .milliseconds(200)
    configuration.token = "s3cret-token"
    configuration.headers = [.init(name: "X-Tenant", value: "team-a")]
    return configuration
}
