import CStallmonCapture
import Foundation
import StallmonReport

/// Appends events, one JSON object per line, to a size-rotated file (`events.jsonl`, `events.jsonl.1`, …).
/// Used from one writer thread per instance; any number of instances and processes may write the same file.
///
/// Each append holds an advisory lock (`flock`) on the file, so writers in other processes (two services with one
/// report directory, a second pipeline finishing its queue) never interleave with a rotation: the size check, the
/// rotation and the write happen under one lock, a writer that finds the file rotated under it reopens the new one,
/// and a partial write is cut back to exactly where it began. Readers (`tail -F`) take no lock.
final class EventLog {
    let path: String
    let maxBytes: Int
    let maxFiles: Int
    private var fd: Int32 = -1
    /// Whether the directory was fsynced since `fd` was opened: a durable line is lost with its file if the file's
    /// own entry (a new file, a rotation) is not on disk.
    private var directorySynced = false
    /// fsync(2), handed in so a test can see which appends pay it and when.
    private let syncFile: (Int32) -> Int32
    private let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        return encoder
    }()

    init(path: String, maxBytes: Int, maxFiles: Int, syncFile: @escaping (Int32) -> Int32 = { fsync($0) }) {
        self.path = path
        self.maxBytes = maxBytes
        self.maxFiles = maxFiles
        self.syncFile = syncFile
    }

    deinit {
        if fd >= 0 { close(fd) }
    }

    /// Appends one line with a single write(2), so concurrent readers never see half a line. `durable`: the line is
    /// on disk when this returns (fsync of the file, and of its directory once per opened file), for the evidence of
    /// a hang, which the process may not outlive; every other line leaves that to the kernel and costs no fsync.
    func append(_ event: StallEvent, durable: Bool = false) throws(FileError) {
        var line: [UInt8]
        do {
            line = Array(try encoder.encode(event))
        } catch {
            throw FileError(path: path, operation: "encode event for", errorNumber: EINVAL)
        }
        line.append(UInt8(ascii: "\n"))
        try lockCurrentFile()
        defer { _ = flock(fd, LOCK_UN) }
        var size = try currentSize()
        // Compared without a sum: a sparse or truncated log can claim any size.
        if size > 0 && size > maxBytes - line.count {
            try rotate()
            size = try currentSize()
        }
        do {
            try AtomicFile.writeAll(fd, line, path: path)
        } catch {
            // A partial write (ENOSPC, EFBIG) must not leave half a line for the next event to be glued to. Every
            // writer holds the lock, so the file ends with exactly what this write added.
            _ = ftruncate(fd, off_t(size))
            _ = flock(fd, LOCK_UN)
            close(fd)  // reopen next time: the file may have been removed or the disk freed
            fd = -1
            throw error
        }
        if durable { try makeDurable() }
    }

    /// Called with the lock held, after the write: fsyncs the file, and its directory unless that was done since the
    /// file was opened. A failed fsync is reported (the line may not be on disk) but the line stays: it was written.
    private func makeDurable() throws(FileError) {
        while syncFile(fd) != 0 {
            guard errno == EINTR else { throw .last("fsync", path) }
        }
        if !directorySynced {
            try AtomicFile.syncDirectory(AtomicFile.parentDirectory(of: path))
            directorySynced = true
        }
    }

    /// Opens the file at `path` if needed and locks it; reopens when another writer rotated or someone removed it
    /// (logrotate, cleanup) between our open and our lock.
    private func lockCurrentFile() throws(FileError) {
        for _ in 0..<16 {
            if fd < 0 { try open() }
            while flock(fd, LOCK_EX) != 0 {
                guard errno == EINTR else { throw .last("lock", path) }
            }
            if isStillAtPath() { return }
            _ = flock(fd, LOCK_UN)
            close(fd)
            fd = -1
        }
        throw FileError(path: path, operation: "lock (the file keeps being replaced)", errorNumber: EAGAIN)
    }

    private func isStillAtPath() -> Bool {
        var onDisk = stat()
        var open = stat()
        return lstat(path, &onDisk) == 0 && fstat(fd, &open) == 0 && onDisk.st_ino == open.st_ino
            && onDisk.st_dev == open.st_dev
    }

    private func open() throws(FileError) {
        try AtomicFile.createDirectory(AtomicFile.parentDirectory(of: path))
        directorySynced = false
        // O_NOFOLLOW and O_NONBLOCK: a symbolic link or a FIFO where the log should be is refused, never followed
        // or waited on (the directory is checked too, see `DirectoryTrust`; this is the second line of defence).
        fd = Glibc.open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            if errno == ELOOP {
                throw FileError(path: path, operation: "refusing event log", errorNumber: ELOOP,
                                detail: "it is a symbolic link, which is never followed")
            }
            throw .last("open", path)
        }
        var info = stat()
        let refusal: String? = if fstat(fd, &info) != 0 {
            "cannot stat it"
        } else if info.st_mode & S_IFMT != S_IFREG {
            "it is not a regular file"
        } else if info.st_uid != geteuid() {
            "it is owned by \(DirectoryTrust.user(info.st_uid)), not by this process's user"
        } else if info.st_nlink > 1 {
            "it has \(info.st_nlink) hard links; another name of the same file could be anyone's"
        } else {
            nil
        }
        if let refusal {
            close(fd)
            fd = -1
            throw FileError(path: path, operation: "refusing event log", errorNumber: EPERM, detail: refusal)
        }
    }

    private func currentSize() throws(FileError) -> Int {
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw .last("stat", path) }
        return Int(info.st_size)
    }

    /// Called with the lock held: moves the full file aside and continues in a new, locked one. Writers waiting for
    /// the old file's lock find it no longer at `path` and reopen.
    private func rotate() throws(FileError) {
        if maxFiles == 0 {
            _ = unlink(path)
        } else {
            _ = unlink("\(path).\(maxFiles)")
            if maxFiles > 1 {
                for index in stride(from: maxFiles - 1, through: 1, by: -1) {
                    _ = rename("\(path).\(index)", "\(path).\(index + 1)")
                }
            }
            guard rename(path, "\(path).1") == 0 else { throw .last("rotate", path) }
        }
        let old = fd
        fd = -1
        defer {
            _ = flock(old, LOCK_UN)
            close(old)
        }
        try lockCurrentFile()
    }
}
