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
        guard let schema = probe.schema else {
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
        do {
            return try JSONDecoder().decode(StallReport.self, from: data)
        } catch let DecodingError.keyNotFound(key, _) {
            throw ReportReadError(path: path, reason: "incomplete report: missing \"\(key.stringValue)\"")
        } catch {
            throw ReportReadError(path: path, reason: "malformed report: \(error)")
        }
    }

    /// The result of reading a directory of reports.
    public struct DirectoryScan: Sendable {
        /// Reports read, oldest first.
        public var reports: [(path: String, report: StallReport)]
        /// Files named like reports that could not be read.
        public var problems: [ReportReadError]
    }

    /// Reads every `stall-*.json` in `directory` (temporary `.tmp-*` files of writes in progress are not reports).
    /// Throws when the directory itself cannot be listed.
    public static func scan(directory: String) throws(ReportReadError) -> DirectoryScan {
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
        var scan = DirectoryScan(reports: [], problems: [])
        for name in names.sorted() where name.hasPrefix("stall-") && name.hasSuffix(".json") {
            let path = directory.hasSuffix("/") ? directory + name : directory + "/" + name
            do {
                scan.reports.append((path, try read(path)))
            } catch {
                scan.problems.append(error)
            }
        }
        scan.reports.sort { $0.report.start.wall < $1.report.start.wall }
        return scan
    }
}
