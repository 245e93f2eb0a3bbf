import Foundation

/// A file that could not be read as a stall report, and why, in words for people.
public struct ReportReadError: Error, CustomStringConvertible, Sendable, Equatable {
    public let path: String
    public let reason: String

    public var description: String { "\(path): \(reason)" }
}

/// Reads stall reports from disk, refusing anything that is not a complete report of a schema this build knows.
public enum ReportReader {
    /// Decodes one report file.
    public static func read(_ path: String) throws(ReportReadError) -> StallReport {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw ReportReadError(path: path, reason: "no such file")
        }
        guard !isDirectory.boolValue else { throw ReportReadError(path: path, reason: "is a directory") }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ReportReadError(path: path, reason: "cannot be read (permission denied?)")
        }
        return try decode(data, path: path)
    }

    static func readThin(_ path: String) throws(ReportReadError) -> StallReport {
        guard let data = FileManager.default.contents(atPath: path) else {
            return try read(path)  // names the reason (missing, directory, permission)
        }
        return try decodeThin(data, path: path)
    }

    /// Decodes report bytes; `path` only labels errors.
    public static func decode(_ data: Data, path: String) throws(ReportReadError) -> StallReport {
        if data.isEmpty { throw ReportReadError(path: path, reason: "empty file") }
        struct SchemaProbe: Decodable { var schema: String? }
        let probe: SchemaProbe
        do {
            probe = try JSONDecoder().decode(SchemaProbe.self, from: data)
        } catch {
            throw ReportReadError(path: path, reason: "not valid JSON (truncated or corrupt)")
        }
        try checkSchema(probe.schema, path: path)
        do {
            return try JSONDecoder().decode(StallReport.self, from: data)
        } catch let DecodingError.keyNotFound(key, _) {
            throw ReportReadError(path: path, reason: "incomplete report: missing \"\(key.stringValue)\"")
        } catch {
            throw ReportReadError(path: path, reason: "malformed report: \(error)")
        }
    }

    /// Decodes only what a summary needs, in one pass: samples, frames, images and the call tree are skipped and left
    /// empty in the result. Same validation and errors as `decode`.
    public static func decodeThin(_ data: Data, path: String) throws(ReportReadError) -> StallReport {
        if data.isEmpty { throw ReportReadError(path: path, reason: "empty file") }
        struct Thin: Decodable {
            var schema: String?
            var id: String?
            var ongoing: Bool?
            var process: StallReport.ProcessDescription?
            var thread: StallReport.ThreadDescription?
            var loop: String?
            var thresholdMs: Double?
            var start: StallReport.StartTime?
            var durationMs: Double?
            var durationSource: String?
            var label: String?
            var topFrame: StallReport.FrameSummary?
            var captures: StallReport.CaptureCounts?
            var stallClass: StallClass?
            var signature: String?
            var suppressedBefore: Int?
            var frozenMs: Double?
            enum CodingKeys: String, CodingKey {
                case schema, id, ongoing, process, thread, loop, thresholdMs, start, durationMs, durationSource, label
                case topFrame, captures, signature, suppressedBefore, frozenMs
                case stallClass = "class"
            }
        }
        let thin: Thin
        do {
            thin = try JSONDecoder().decode(Thin.self, from: data)
        } catch {
            // Not an object of the expected shape: let the full decoder name the reason.
            _ = try decode(data, path: path)
            throw ReportReadError(path: path, reason: "malformed report: \(error)")
        }
        try checkSchema(thin.schema, path: path)
        guard let id = thin.id, let ongoing = thin.ongoing, let process = thin.process, let thread = thin.thread,
              let loop = thin.loop, let thresholdMs = thin.thresholdMs, let start = thin.start,
              let durationMs = thin.durationMs, let durationSource = thin.durationSource, let label = thin.label,
              let captures = thin.captures else {
            _ = try decode(data, path: path)  // names the missing field
            throw ReportReadError(path: path, reason: "incomplete report")
        }
        return StallReport(schema: thin.schema!, id: id, ongoing: ongoing, process: process, thread: thread, loop: loop,
                           thresholdMs: thresholdMs, start: start, durationMs: durationMs,
                           durationSource: durationSource, label: label, topFrame: thin.topFrame, captures: captures,
                           samples: [], frames: [], images: [], stallClass: thin.stallClass,
                           frozenMs: thin.frozenMs, signature: thin.signature, suppressedBefore: thin.suppressedBefore)
    }

    private static func checkSchema(_ schema: String?, path: String) throws(ReportReadError) {
        guard let schema else {
            throw ReportReadError(path: path, reason: "not a stallmon report (no \"schema\" field)")
        }
        let prefix = "stallmon.report/"
        guard schema.hasPrefix(prefix), let version = Int(schema.dropFirst(prefix.count)) else {
            throw ReportReadError(path: path, reason: "not a stallmon report (schema \"\(schema)\")")
        }
        guard version <= 1 else {
            throw ReportReadError(path: path, reason: "written by a newer stallmon (schema \(schema)); "
                + "this build reads \(StallReport.currentSchema)")
        }
    }

    /// The result of reading a directory of reports.
    public struct DirectoryScan: Sendable {
        /// Reports read, oldest first.
        public var reports: [(path: String, report: StallReport)]
        /// Files named like reports that could not be read.
        public var problems: [ReportReadError]
    }

    /// Reads every `stall-*.json` in `directory` (temporary `.tmp-*` files of writes in progress are not reports),
    /// on all cores. `thin` decodes only what a summary needs (see `decodeThin`). Throws when the directory itself
    /// cannot be listed.
    public static func scan(directory: String, thin: Bool = false) throws(ReportReadError) -> DirectoryScan {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory)
        } catch {
            var isDirectory: ObjCBool = false
            let exists = FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory)
            let reason = !exists ? "no such directory" : !isDirectory.boolValue ? "not a directory"
                : "cannot list directory (permission denied?)"
            throw ReportReadError(path: directory, reason: reason)
        }
        let paths = names.sorted().filter { $0.hasPrefix("stall-") && $0.hasSuffix(".json") }
            .map { directory.hasSuffix("/") ? directory + $0 : directory + "/" + $0 }
        var outcomes = [Result<StallReport, ReportReadError>?](repeating: nil, count: paths.count)
        let chunk = 256
        outcomes.withUnsafeMutableBufferPointer { buffer in
            let slots = UnsafeSendable(buffer)
            DispatchQueue.concurrentPerform(iterations: (paths.count + chunk - 1) / chunk) { block in
                for index in block * chunk..<min(paths.count, (block + 1) * chunk) {
                    slots.value[index] = Result { () throws(ReportReadError) -> StallReport in
                        thin ? try readThin(paths[index]) : try read(paths[index])
                    }
                }
            }
        }
        var scan = DirectoryScan(reports: [], problems: [])
        for (path, outcome) in zip(paths, outcomes) {
            switch outcome {
            case .success(let report): scan.reports.append((path, report))
            case .failure(let error): scan.problems.append(error)
            case nil: break
            }
        }
        scan.reports.sort { $0.report.start.wall < $1.report.start.wall }
        return scan
    }
}

/// A buffer written at distinct indices from concurrentPerform's threads.
private struct UnsafeSendable<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
