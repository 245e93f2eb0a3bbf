import Foundation

/// Which reports the retention removes, as a pure function (the writer thread only carries it out): oldest first,
/// until what remains is within `report_max_count`, `report_max_bytes` and `report_max_age_hours`. A report still
/// queued for upload (the same file linked in `spool/pending/`) is never removed here; the spool's own quotas decide
/// about it. One whose other link is in `spool/rejected/` is not queued: before, that second link kept it forever.
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
        /// The same file is queued for upload (linked in `spool/pending/` under its name).
        var queued: Bool
    }

    /// `entries` sorted oldest first (report names begin with the stall's UTC start). A report still linked from the
    /// spool (pending upload) is kept.
    static func entriesToRemove(_ entries: [Entry], limits: Limits, now: UInt64) -> [Entry] {
        OldestFirstQuota.entriesToRemove(
            entries, maxCount: limits.maxCount, maxBytes: limits.maxBytes, maxAgeNanoseconds: limits.maxAgeNanoseconds,
            now: now, bytes: \.bytes, time: \.modified, removable: { !$0.queued })
    }

    /// The reports in `directory` (`stall-*.json`), oldest first.
    static func list(_ directory: String) -> [Entry] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return [] }
        return names.filter { $0.hasPrefix("stall-") && $0.hasSuffix(".json") }.sorted().compactMap { name in
            var info = stat()
            guard stat(directory + "/" + name, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return nil }
            return Entry(name: name, bytes: Int(info.st_size), modified: info.modifiedNanoseconds,
                         queued: info.st_nlink > 1 && isQueued(name, info, in: directory))
        }
    }

    /// Whether `spool/pending/name` is this very file (the spool's layout: `StallmonUpload.Spool`).
    private static func isQueued(_ name: String, _ info: stat, in directory: String) -> Bool {
        var queued = stat()
        guard lstat(directory + "/spool/pending/" + name, &queued) == 0 else { return false }
        return queued.st_dev == info.st_dev && queued.st_ino == info.st_ino
    }
}
