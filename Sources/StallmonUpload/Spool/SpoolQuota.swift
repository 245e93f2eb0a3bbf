import CStallmonLoopShims
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

/// Which file a name held when it was listed: device and inode, and what changes when an inode number is reused for
/// another file. ext4 hands a freed inode number to the next file created (three times of three for an interim
/// report replaced by its hang report, then its final one, while the interim was being sent): device and inode alone
/// took the unsent final for the delivered interim and removed it. The inode's generation (set anew at each reuse on
/// ext4, XFS and btrfs; tmpfs and overlayfs have none), the modification time (to the kernel's timestamp granularity:
/// a clock tick on older kernels) and the size tell them apart; not the change time, which the spool's own renames
/// and links set. Without a generation, two reports of one size written within one tick would look the same.
package struct FileIdentity: Hashable, Sendable {
    package var device: UInt64
    package var inode: UInt64
    /// FS_IOC_GETVERSION, nil where the file system has none.
    package var generation: UInt32?
    /// st_mtim in nanoseconds since the epoch (saturated): a report is written once, so its content's time.
    package var modified: UInt64
    package var size: Int64

    package init(device: UInt64, inode: UInt64, generation: UInt32? = nil, modified: UInt64 = 0, size: Int64 = 0) {
        self.device = device
        self.inode = inode
        self.generation = generation
        self.modified = modified
        self.size = size
    }

    init(_ info: stat, generation: UInt32?) {
        self.init(device: UInt64(info.st_dev), inode: UInt64(info.st_ino), generation: generation,
                  modified: info.modifiedNanoseconds, size: Int64(info.st_size))
    }

    /// The same file: device, inode, modification time and size equal, and the generations too where both are known
    /// (a listing takes no generation, which needs the file opened; the entries sent are pinned with theirs). Two
    /// unknown identities are the same; an unknown one is not the same as a known one.
    package static func same(_ one: FileIdentity?, _ other: FileIdentity?) -> Bool {
        guard let one, let other else { return one == nil && other == nil }
        guard one.device == other.device, one.inode == other.inode, one.modified == other.modified,
              one.size == other.size else { return false }
        guard let generation = one.generation, let otherGeneration = other.generation else { return true }
        return generation == otherGeneration
    }

    /// The identity of the regular file at `path`, without following a link; nil when it is gone or not a regular
    /// file. Opened (O_PATH cannot ask for the generation) non-blocking, so a FIFO put there never blocks.
    static func of(_ path: String) -> FileIdentity? {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
        var generation: UInt32 = 0
        let known = cstallmon_file_generation(fd, &generation) == 0
        return FileIdentity(info, generation: known ? generation : nil)
    }
}
