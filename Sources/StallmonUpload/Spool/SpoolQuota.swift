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
public struct SpoolLimits: Sendable, Equatable {
    public var maxReports: Int
    public var maxBytes: Int
    public var maxAgeNanoseconds: UInt64

    public init(maxReports: Int, maxBytes: Int, maxAgeNanoseconds: UInt64) {
        self.maxReports = maxReports
        self.maxBytes = maxBytes
        self.maxAgeNanoseconds = maxAgeNanoseconds
    }
}

/// One report waiting in the spool.
public struct SpoolEntry: Sendable, Equatable {
    /// File name in `pending/` (chronological: it begins with the stall's UTC start).
    public var name: String
    public var bytes: Int
    /// When it was spooled, nanoseconds since the Unix epoch (the report file's mtime).
    public var spooledAt: UInt64
    /// The file it was when listed: a delivered entry is removed only if `pending/` still holds that very file (an
    /// interim report replaced by its final one meanwhile stays). Nil: not known (removed by name).
    public var identity: FileIdentity?

    public init(name: String, bytes: Int, spooledAt: UInt64, identity: FileIdentity? = nil) {
        self.name = name
        self.bytes = bytes
        self.spooledAt = spooledAt
        self.identity = identity
    }
}

/// A file's device and inode.
public struct FileIdentity: Hashable, Sendable {
    public var device: UInt64
    public var inode: UInt64

    public init(device: UInt64, inode: UInt64) {
        self.device = device
        self.inode = inode
    }

    init(_ info: stat) {
        self.init(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }
}
