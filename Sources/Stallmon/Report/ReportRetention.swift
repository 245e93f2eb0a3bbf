import Foundation

/// Which reports the retention removes, as a pure function (the writer thread only carries it out): oldest first,
/// until what remains is within `report_max_count`, `report_max_bytes` and `report_max_age_hours`. A report with
/// more than one hard link is still referenced elsewhere (queued in the upload spool) and is never removed here;
/// the spool's own quotas decide about it.
enum ReportRetention {
    struct Limits: Equatable {
        var maxCount: Int
        var maxBytes: Int
        var maxAgeNanoseconds: UInt64
    }

    struct Entry: Equatable {
        var name: String
        var bytes: Int
        /// Modification time, nanoseconds since the epoch.
        var modified: UInt64
        var linkCount: Int
    }

    /// `entries` sorted oldest first (report names begin with the stall's UTC start). A report still linked from the
    /// spool (pending upload) is kept.
    static func entriesToRemove(_ entries: [Entry], limits: Limits, now: UInt64) -> [Entry] {
        OldestFirstQuota.entriesToRemove(
            entries, maxCount: limits.maxCount, maxBytes: limits.maxBytes, maxAgeNanoseconds: limits.maxAgeNanoseconds,
            now: now, bytes: \.bytes, time: \.modified, removable: { $0.linkCount <= 1 })
    }

    /// The reports in `directory` (`stall-*.json`), oldest first.
    static func list(_ directory: String) -> [Entry] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return [] }
        return names.filter { $0.hasPrefix("stall-") && $0.hasSuffix(".json") }.sorted().compactMap { name in
            var info = stat()
            guard stat(directory + "/" + name, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return nil }
            return Entry(name: name, bytes: Int(info.st_size),
                         modified: info.modifiedNanoseconds,
                         linkCount: Int(info.st_nlink))
        }
    }
}
