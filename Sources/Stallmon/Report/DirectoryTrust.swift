#if canImport(Glibc)
import Glibc
#endif

/// Whether a directory stallmon writes into (the report directory, the spool, the event log's directory) can be
/// trusted: nobody but this process's user may be able to place or swap anything in it.
///
/// The default report directory, `/var/tmp/stallmon-<euid>`, has a predictable name in a world-writable directory:
/// another local user can create it first and put a symbolic link where a report or the event log will go, so that
/// a service running as root appends to a file of the attacker's choosing. The same holds for any configured path
/// under a directory another user can write. So a directory is used only if
/// - it is a directory, not a symbolic link to one (point `report_dir` at the real directory);
/// - it is owned by the effective user;
/// - neither its group nor others may write it (stallmon creates it 0700);
/// - every directory above it (symbolic links resolved) is owned by root or the effective user, and writable by
///   nobody else unless it has the sticky bit (as `/tmp` and `/var/tmp` do, so nobody can rename what is ours).
/// This is OpenSSH's rule for `~/.ssh` (StrictModes). Files in the directory are then opened with `O_NOFOLLOW` as a
/// second line of defence.
public enum DirectoryTrust {
    /// Throws a `FileError` whose description names `path`, the reason and the owner, when `path` cannot be trusted
    /// (or does not exist: `ENOENT`).
    public static func verify(_ path: String) throws(FileError) {
        var info = stat()
        guard lstat(path, &info) == 0 else { throw .last("use report directory", path) }
        try verifyEntry(path, info)
        try verifyAncestors(of: path)
    }

    /// Like `verify`, but a path that does not exist yet is fine (it will be created 0700). Used when a monitor is
    /// created, so an untrusted directory is refused before anything starts.
    public static func verifyIfPresent(_ path: String) throws(FileError) {
        var info = stat()
        guard lstat(path, &info) == 0 else { return }
        try verify(path)
    }

    private static func verifyEntry(_ path: String, _ info: stat) throws(FileError) {
        let euid = geteuid()
        switch info.st_mode & S_IFMT {
        case S_IFDIR: break
        case S_IFLNK:
            throw refusal(path, "it is a symbolic link (to \(linkTarget(path))), which another user may have "
                + "planted; point the configuration at the real directory")
        default:
            throw FileError(path: path, operation: "use as directory", errorNumber: ENOTDIR)
        }
        guard info.st_uid == euid else {
            throw refusal(path, "it is owned by \(user(info.st_uid)), not by this process's user \(user(euid)); "
                + "another user could redirect what is written there. Remove it or choose another directory")
        }
        guard info.st_mode & (S_IWGRP | S_IWOTH) == 0 else {
            throw refusal(path, "it is writable by other users (mode \(octal(info.st_mode))); make it 0700 "
                + "(chmod 700) or choose another directory")
        }
    }

    private static func verifyAncestors(of path: String) throws(FileError) {
        let parent = AtomicFile.parentDirectory(of: path)
        guard let resolved = realpath(parent, nil) else { throw .last("resolve parent directory of", path) }
        var current = String(cString: resolved)
        free(resolved)
        let euid = geteuid()
        while true {
            var info = stat()
            guard stat(current, &info) == 0 else { throw .last("check parent directory", current) }
            if info.st_uid != 0 && info.st_uid != euid {
                throw refusal(path, "its parent directory \(current) is owned by \(user(info.st_uid)), who could "
                    + "replace it; choose a directory under one owned by root or \(user(euid))")
            }
            if info.st_mode & (S_IWGRP | S_IWOTH) != 0 && info.st_mode & S_ISVTX == 0 {
                throw refusal(path, "its parent directory \(current) is writable by other users without the sticky "
                    + "bit (mode \(octal(info.st_mode))), so they could replace it")
            }
            if current == "/" { return }
            current = AtomicFile.parentDirectory(of: current)
        }
    }

    private static func refusal(_ path: String, _ reason: String) -> FileError {
        FileError(path: path, operation: "refusing untrusted directory", errorNumber: EPERM, detail: reason)
    }

    /// `uid 1001 (alice)`, or `uid 1001` without a passwd entry.
    static func user(_ uid: uid_t) -> String {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4096)
        if getpwuid_r(uid, &entry, &buffer, buffer.count, &result) == 0, let result, let name = result.pointee.pw_name {
            return "uid \(uid) (\(String(cString: name)))"
        }
        return "uid \(uid)"
    }

    private static func octal(_ mode: mode_t) -> String {
        "0" + String(mode & 0o7777, radix: 8)
    }

    private static func linkTarget(_ path: String) -> String {
        var buffer = [CChar](repeating: 0, count: 4097)
        let count = readlink(path, &buffer, 4096)
        guard count > 0 else { return "?" }
        return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
