import Glibc
import Stallmon
import StallmonReport

enum SpoolQuota {
    /// The entries to drop so that what remains is within `limits` at `now` (`OldestFirstQuota`, the report
    /// directory's rule too). `entries` must be sorted oldest first.
    static func entriesToDrop(_ entries: [SpoolEntry], limits: SpoolLimits, now: UInt64) -> [SpoolEntry] {
        OldestFirstQuota.entriesToRemove(
            entries, maxCount: limits.maxReports, maxBytes: limits.maxBytes,
            maxAgeNanoseconds: limits.maxAgeNanoseconds, now: now, bytes: \.bytes, time: \.spooledAt)
    }
}

/// Spool quotas: beyond them the oldest reports are dropped.
package struct SpoolLimits: Sendable, Equatable {
    package var maxReports: Int
    package var maxBytes: Int
    package var maxAgeNanoseconds: UInt64

    package init(maxReports: Int, maxBytes: Int, maxAgeNanoseconds: UInt64) {
        self.maxReports = maxReports
        self.maxBytes = maxBytes
        self.maxAgeNanoseconds = maxAgeNanoseconds
    }
}

/// One report waiting in the spool.
package struct SpoolEntry: Sendable, Equatable {
    /// File name in `pending/` (chronological: it begins with the stall's UTC start).
    package var name: String
    package var bytes: Int
    /// When it was spooled, nanoseconds since the Unix epoch (the report file's mtime).
    package var spooledAt: UInt64
    /// The file it was when listed: a delivered entry is removed only if `pending/` still holds that very file (an
    /// interim report replaced by its final one meanwhile stays). Nil: not known (removed by name).
    package var identity: FileIdentity?

    package init(name: String, bytes: Int, spooledAt: UInt64, identity: FileIdentity? = nil) {
        self.name = name
        self.bytes = bytes
        self.spooledAt = spooledAt
        self.identity = identity
    }
}

/// A file's device and inode.
package struct FileIdentity: Hashable, Sendable {
    package var device: UInt64
    package var inode: UInt64

    package init(device: UInt64, inode: UInt64) {
        self.device = device
        self.inode = inode
    }

    init(_ info: stat) {
        self.init(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }
}
