import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The scripted Python collector (receiver.py) on 127.0.0.1, stopped when this object is released.
public final class Receiver: @unchecked Sendable {
    public let port: Int
    public let logPath: String
    private let process: Process

    /// One request as the receiver saw it.
    public struct Request: Decodable {
        public var n: Int
        public var time: Double
        public var path: String
        public var status: FlexibleStatus
        public var ids: [String]?
        public var parse_error: String?
        public var content_encoding: String?
        public var content_type: String?
        public var authorization: String?
        public var custom: String?
        public var resources: [[String: AnyJSON]]?
        /// Per log record: its attributes as opentelemetry-proto's MessageToDict gives them (`{"stringValue": …}`).
        public var records: [[String: AnyJSON]]?
        /// OTLP profiles requests: each profile resolved (`type`, `unit`, `time_unix_nano`, `resource`, `samples`:
        /// `functions` innermost first, `values`, `attributes`, `trace_id`, `span_id`, `timestamps`).
        public var profiles: [[String: AnyJSON]]?
    }

    /// Starts receiver.py with a JSON `plan` of per-request behaviours (see the script).
    public init(plan: String = "[]", lifetimeSeconds: Int = 60) throws {
        let directory = FileManager.default.temporaryDirectory.path + "/stallmon-receiver-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        logPath = directory + "/requests.jsonl"
        let portFile = directory + "/port"
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("receiver.py")
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script.path, "--port-file", portFile, "--log", logPath, "--plan", plan,
                             "--lifetime", String(lifetimeSeconds)]
        try process.run()
        var started = false
        for _ in 0..<1000 where !started {
            started = FileManager.default.fileExists(atPath: portFile)
            if !started { usleep(10_000) }
        }
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

    public var baseURL: String { "http://127.0.0.1:\(port)" }

    public var requests: [Request] {
        guard let text = try? String(contentsOfFile: logPath, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { try? JSONDecoder().decode(Request.self, from: Data($0.utf8)) }
    }

    /// Requests that have arrived, answered or not (logged before any scripted delay).
    public var arrivals: Int {
        guard let text = try? String(contentsOfFile: logPath + ".arrivals", encoding: .utf8) else { return 0 }
        return text.split(separator: "\n").count
    }

    /// Ids the receiver acknowledged with a 2xx.
    public var acknowledgedIDs: [String] {
        requests.filter { $0.status.code.map { (200..<300).contains($0) } ?? false }.flatMap { $0.ids ?? [] }
    }

    public struct ReceiverError: Error, CustomStringConvertible {
        public let description: String
    }
}

/// The receiver logs a numeric status, or "reset".
public struct FlexibleStatus: Decodable {
    public var code: Int?
    public init(from decoder: Decoder) throws {
        code = try? decoder.singleValueContainer().decode(Int.self)
    }
}

/// Any JSON value (for fields the tests only look into loosely).
public enum AnyJSON: Decodable, Equatable {
    case string(String), number(Double), bool(Bool), object([String: AnyJSON]), array([AnyJSON]), null
    public init(from decoder: Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let value = try? container.decode(String.self) { self = .string(value) }
        else if let value = try? container.decode(Bool.self) { self = .bool(value) }
        else if let value = try? container.decode(Double.self) { self = .number(value) }
        else if let value = try? container.decode([String: AnyJSON].self) { self = .object(value) }
        else if let value = try? container.decode([AnyJSON].self) { self = .array(value) }
        else { self = .null }
    }
}

