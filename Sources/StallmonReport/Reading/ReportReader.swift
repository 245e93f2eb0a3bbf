import Foundation
#if canImport(Glibc)
import Glibc
#endif

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
        try decode(try contents(of: path), path: path)
    }

    /// Like `read`, but a symbolic link is refused rather than followed: for files another process placed, whose
    /// contents leave the host (the upload spool).
    package static func readWithoutFollowingLinks(_ path: String) throws(ReportReadError) -> StallReport {
        try decode(try contents(of: path, followingLinks: false), path: path)
    }

    /// Reads what a summary needs of one report file (see `decodeDigest`).
    public static func readDigest(_ path: String) throws(ReportReadError) -> StallDigest {
        try decodeDigest(try contents(of: path), path: path)
    }
}

/// A subset of a report's members, which `ReportReader.decodeSubset` decodes without the others.
package protocol ReportSubset: Decodable, Sendable {
    /// The same subset of a report decoded whole (the reader's fallback).
    init(_ report: StallReport)
    var schema: String { get }
    /// `start.wall`, which scans sort by.
    var startWall: String { get }
}

extension ReportReader {

    /// No report is anywhere near this large; a bigger file is refused before it is read into memory.
    static let maximumReportBytes = 256 << 20

    /// The bytes of a regular file, with the reason when there are none: missing, a directory, not a regular file
    /// (a FIFO or a device would block or never end), unreadable (with the system's reason), or too large.
    static func contents(of path: String, followingLinks: Bool = true) throws(ReportReadError) -> Data {
        // O_NONBLOCK: opening a FIFO with no writer must not hang; it is refused below as not a regular file.
        let fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | (followingLinks ? 0 : O_NOFOLLOW))
        guard fd >= 0 else {
            let error = errno
            switch error {
            case ENOENT: throw ReportReadError(path: path, reason: "no such file")
            case ELOOP where !followingLinks:
                throw ReportReadError(path: path, reason: "is a symbolic link, which is never followed here")
            case EACCES, EPERM: throw ReportReadError(path: path, reason: "cannot be read: permission denied")
            default: throw ReportReadError(path: path, reason: "cannot be read: \(String(cString: strerror(error)))")
            }
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            throw ReportReadError(path: path, reason: "cannot be read: \(String(cString: strerror(errno)))")
        }
        switch info.st_mode & S_IFMT {
        case S_IFREG: break
        case S_IFDIR: throw ReportReadError(path: path, reason: "is a directory")
        case S_IFIFO: throw ReportReadError(path: path, reason: "is not a regular file (a FIFO)")
        case S_IFCHR: throw ReportReadError(path: path, reason: "is not a regular file (a character device)")
        case S_IFBLK: throw ReportReadError(path: path, reason: "is not a regular file (a block device)")
        case S_IFSOCK: throw ReportReadError(path: path, reason: "is not a regular file (a socket)")
        default: throw ReportReadError(path: path, reason: "is not a regular file")
        }
        guard Int(info.st_size) <= maximumReportBytes else {
            throw ReportReadError(path: path, reason: "is \(info.st_size) bytes, larger than any report "
                + "(\(maximumReportBytes >> 20) MiB)")
        }
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size))
        var total = 0
        while total < bytes.count {
            let got = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + total, $0.count - total) }
            if got < 0 && errno == EINTR { continue }
            if got < 0 {
                throw ReportReadError(path: path, reason: "cannot be read: \(String(cString: strerror(errno)))")
            }
            if got == 0 { break }  // shrank while being read
            total += got
        }
        return Data(bytes[0..<total])
    }

    /// Decodes report bytes; `path` only labels errors.
    public static func decode(_ data: Data, path: String) throws(ReportReadError) -> StallReport {
        if data.isEmpty { throw ReportReadError(path: path, reason: "empty file") }
        if let report = try skimmed(StallReport.self, from: data, path: path, schema: \.schema) { return report }
        return try decodeWithFoundation(data, path: path)
    }

    /// Foundation's JSONDecoder, whose errors name what is wrong with a file.
    private static func decodeWithFoundation(_ data: Data, path: String) throws(ReportReadError) -> StallReport {
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

    /// Decodes what a summary needs of a report (`decodeSubset`).
    public static func decodeDigest(_ data: Data, path: String) throws(ReportReadError) -> StallDigest {
        try decodeSubset(data, path: path)
    }

    /// Decodes a subset of a report's members. The whole file is checked for JSON syntax and for every member a
    /// report must have, but only the subset's members are decoded: samples, frames and images, most of a report,
    /// are skipped unless the subset has them (`JSONSkimmer`). Errors are the same as `decode`'s, whose reasons are
    /// used.
    package static func decodeSubset<Subset: ReportSubset>(_ data: Data, path: String) throws(ReportReadError)
        -> Subset {
        if data.isEmpty { throw ReportReadError(path: path, reason: "empty file") }
        switch skim(Subset.self, from: data) {
        case .decoded(let subset):
            try checkSchema(subset.schema, path: path)
            return subset
        case .leftToFoundation:
            // A report whose subset holds something only Foundation decodes: Foundation decodes the same subset,
            // so that a member outside it never makes the report unreadable here when it does not elsewhere.
            if let subset = try? JSONDecoder().decode(Subset.self, from: data) {
                try checkSchema(subset.schema, path: path)
                return subset
            }
        case .notAReport:
            break
        }
        // Not JSON, not an object, a member missing, or a subset Foundation refuses too: the full decoder names the
        // reason. Should it accept what the skimmer refused, its report stands.
        return Subset(try decodeWithFoundation(data, path: path))
    }

    /// Members every report has (`StallReport`'s non-optional properties).
    private static let requiredMembers: [[UInt8]] = StallReport.requiredKeys.map { Array($0.utf8) }

    /// What the skimmer and `SkimmedJSONDecoder` made of a file.
    private enum Skimmed<T> {
        case decoded(T)
        /// Valid JSON with every member a report must have, holding something only Foundation decodes.
        case leftToFoundation
        /// Not JSON, not an object, or a member every report has is missing.
        case notAReport
    }

    private static func skim<T: Decodable>(_ type: T.Type, from data: Data) -> Skimmed<T> {
        data.withUnsafeBytes { bytes -> Skimmed<T> in
            guard let members = try? JSONSkimmer.topLevelMembers(bytes), hasRequiredMembers(members, in: bytes) else {
                return .notAReport
            }
            guard let value = try? SkimmedJSONDecoder.decode(T.self, from: bytes, topLevel: members) else {
                return .leftToFoundation
            }
            return .decoded(value)
        }
    }

    /// `T` read by `SkimmedJSONDecoder`, of a schema this build reads; nil when the decoder left it to Foundation (the
    /// caller's fallback, whose errors name what is wrong).
    private static func skimmed<T: Decodable>(
        _ type: T.Type, from data: Data, path: String, schema: (T) -> String
    ) throws(ReportReadError) -> T? {
        guard case .decoded(let value) = skim(T.self, from: data) else { return nil }
        try checkSchema(schema(value), path: path)
        return value
    }

    private static func hasRequiredMembers(_ members: [JSONSkimmer.Member], in bytes: UnsafeRawBufferPointer) -> Bool {
        var missing = requiredMembers.count
        var seen = [Bool](repeating: false, count: missing)
        for member in members {
            let key = UnsafeRawBufferPointer(rebasing: bytes[member.key])
            if let index = requiredMembers.firstIndex(where: { $0.elementsEqual(key) }), !seen[index] {
                seen[index] = true
                missing -= 1
            }
        }
        return missing == 0
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

    /// The result of reading a directory of reports (`StallReport`) or of their digests (`StallDigest`).
    public struct DirectoryScan<Item: Sendable>: Sendable {
        /// What was read, oldest first.
        public var reports: [(path: String, report: Item)]
        /// Files named like reports that could not be read.
        public var problems: [ReportReadError]
    }

    /// Reads every `stall-*.json` in `directory` (temporary `.tmp-*` files of writes in progress are not reports),
    /// on all cores. Throws when the directory itself cannot be listed.
    public static func scan(directory: String) throws(ReportReadError) -> DirectoryScan<StallReport> {
        try scan(directory: directory, start: \.start.wall) { path throws(ReportReadError) in try read(path) }
    }

    /// Reads what a summary needs of every report in `directory` (see `decodeDigest`), on all cores.
    public static func scanDigests(directory: String) throws(ReportReadError) -> DirectoryScan<StallDigest> {
        try scanSubsets(directory: directory)
    }

    /// Reads a subset of every report in `directory` (see `decodeSubset`), on all cores.
    package static func scanSubsets<Subset: ReportSubset>(directory: String) throws(ReportReadError)
        -> DirectoryScan<Subset> {
        try scan(directory: directory, start: \.startWall) { path throws(ReportReadError) in
            try decodeSubset(try contents(of: path), path: path)
        }
    }

    /// Reads a subset of every report in `directory` and folds them into one result, on all cores: each run of
    /// `chunk` files (in name order; `add` is told each file's index in it) is read and folded by `add` into a
    /// partial result of its own on a worker, and
    /// the partials are handed to `merge` in file order on the calling thread, `window` runs at a time. A fold over
    /// a large directory (a profile of 100,000 reports) so holds one window's partials, never the reports, and
    /// reads and adds on every core. Returns the files that could not be read.
    package static func fold<Subset: ReportSubset, Partial: Sendable>(
        in directory: String, chunk: Int = 64, window: Int = 32,
        partial: @Sendable () -> Partial,
        add: @Sendable (inout Partial, _ index: Int, _ path: String, Subset) -> Void,
        merge: (Partial) -> Void
    ) throws(ReportReadError) -> [ReportReadError] {
        let paths = try reportPaths(in: directory)
        let runs = (paths.count + chunk - 1) / chunk
        var problems: [ReportReadError] = []
        for first in stride(from: 0, to: runs, by: window) {
            let count = min(window, runs - first)
            var results = [(partial: Partial, problems: [ReportReadError])?](repeating: nil, count: count)
            results.withUnsafeMutableBufferPointer { buffer in
                let slots = UnsafeSendable(buffer)
                DispatchQueue.concurrentPerform(iterations: count) { offset in
                    let run = first + offset
                    var folded = partial()
                    var unreadable: [ReportReadError] = []
                    for index in (run * chunk)..<min(paths.count, (run + 1) * chunk) {
                        let path = paths[index]
                        do throws(ReportReadError) {
                            add(&folded, index, path, try decodeSubset(try contents(of: path), path: path) as Subset)
                        } catch {
                            unreadable.append(error)
                        }
                    }
                    slots.value[offset] = (folded, unreadable)
                }
            }
            for case let result? in results {
                merge(result.partial)
                problems += result.problems
            }
        }
        return problems
    }

    /// `items` ordered by their start (`start.wall`, whose ISO 8601 form sorts as time does); items that start
    /// together keep their order.
    package static func sortedByStart<Item>(_ items: [(path: String, report: Item)], start: KeyPath<Item, String>)
        -> [(path: String, report: Item)] {
        let starts = items.map { $0.report[keyPath: start] }
        return starts.indices.sorted { (starts[$0], $0) < (starts[$1], $1) }.map { items[$0] }
    }

    /// The report files of `directory` (`stall-*.json`; temporary `.tmp-*` files of writes in progress are not
    /// reports), in name order. Throws when the directory itself cannot be listed.
    private static func reportPaths(in directory: String) throws(ReportReadError) -> [String] {
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
        return names.sorted().filter { $0.hasPrefix("stall-") && $0.hasSuffix(".json") }
            .map { directory.hasSuffix("/") ? directory + $0 : directory + "/" + $0 }
    }

    private static func scan<Item: Sendable>(
        directory: String, start: KeyPath<Item, String>,
        reading read: @Sendable (String) throws(ReportReadError) -> Item
    ) throws(ReportReadError) -> DirectoryScan<Item> {
        let paths = try reportPaths(in: directory)
        let outcomes = readInParallel(paths, chunk: 256, reading: read)
        var scan = DirectoryScan<Item>(reports: [], problems: [])
        for (path, outcome) in zip(paths, outcomes) {
            switch outcome {
            case .success(let report): scan.reports.append((path, report))
            case .failure(let error): scan.problems.append(error)
            }
        }
        scan.reports = sortedByStart(scan.reports, start: start)
        return scan
    }
}

extension ReportReader {
    /// Reads the report files at `paths` on all cores; results in the order of `paths`.
    package static func readAll(_ paths: [String], followingLinks: Bool = true) -> [Result<StallReport, ReportReadError>] {
        readInParallel(paths, chunk: 4) { path throws(ReportReadError) in
            followingLinks ? try read(path) : try readWithoutFollowingLinks(path)
        }
    }

    /// `read` over `paths` on all cores, `chunk` paths per work item; results in the order of `paths`.
    fileprivate static func readInParallel<Item>(
        _ paths: [String], chunk: Int, reading read: @Sendable (String) throws(ReportReadError) -> Item
    ) -> [Result<Item, ReportReadError>] {
        var outcomes = [Result<Item, ReportReadError>?](repeating: nil, count: paths.count)
        outcomes.withUnsafeMutableBufferPointer { buffer in
            let slots = UnsafeSendable(buffer)
            DispatchQueue.concurrentPerform(iterations: (paths.count + chunk - 1) / chunk) { block in
                for index in block * chunk..<min(paths.count, (block + 1) * chunk) {
                    slots.value[index] = Result { () throws(ReportReadError) -> Item in try read(paths[index]) }
                }
            }
        }
        return outcomes.map { $0! }
    }
}

/// A buffer written at distinct indices from concurrentPerform's threads.
private struct UnsafeSendable<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
