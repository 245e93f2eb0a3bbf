#if canImport(Glibc)
import Glibc
#endif

/// Whether a directory stallmon writes into (the report directory, the spool, the event log's directory, the control
/// socket's directory) can be trusted: nobody but this process's user may be able to place or swap anything in it,
/// or steer a path to it somewhere else.
///
/// The default report directory, `/var/tmp/stallmon-<euid>`, has a predictable name in a world-writable directory:
/// another local user can create it first and put a symbolic link where a report or the event log will go, so that
/// a service running as root appends to a file of the attacker's choosing. The same holds for any configured path
/// under a directory another user can write, or through a symbolic link another user owns. So the path is walked
/// one component at a time from `/` (a relative one from the working directory), each looked at with `lstat`:
/// - every directory passed through is owned by root or the effective user, and writable by nobody else unless it
///   has the sticky bit (as `/tmp` and `/var/tmp` do, so nobody can rename what is ours);
/// - a symbolic link on the way is followed only if root or the effective user owns it (its directory was checked
///   already, so nobody else can re-point it); its target is walked the same way;
/// - the directory itself is a directory, not a symbolic link to one (with or without a trailing `/`: point
///   `report_dir` at the real directory), owned by the effective user, writable by nobody else (stallmon creates it
///   0700).
/// This is OpenSSH's rule for `~/.ssh` (StrictModes), applied to every component. Because every entry that decides
/// where the path leads can be changed only by root or the effective user, the path leads to the same directory at
/// every later open; files in it are also opened with `O_NOFOLLOW`, as a second line of defence.
package enum DirectoryTrust {
    /// Throws a `FileError` whose description names `path`, the reason and the owner, when `path` cannot be trusted
    /// (or does not exist: `ENOENT`).
    package static func verify(_ path: String) throws(FileError) {
        _ = try walk(path, stoppingAtMissing: false)
    }

    /// Like `verify`, but a path that does not exist yet is fine (it will be created 0700) as long as what exists of
    /// it is: used when a monitor is created, so an untrusted directory is refused before anything starts.
    package static func verifyIfPresent(_ path: String) throws(FileError) {
        do {
            _ = try walk(path, stoppingAtMissing: true)
        } catch let error where error.errorNumber == EPERM || error.errorNumber == ELOOP {
            throw error  // a path another user could steer
        } catch {
            // A path that cannot be looked at or created (a file on the way, no permission) is no one's to steer: it
            // fails at the first write, as a write error (reports dropped and counted), not at creation.
        }
    }

    /// Walks `path` as `verify` does, up to its first component that does not exist: that component's path, spelled
    /// without links under a directory the walk verified (so `mkdir` on it creates nothing where another user steered
    /// the path); nil when all of `path` exists and is trusted.
    package static func firstMissingComponent(of path: String) throws(FileError) -> String? {
        try walk(path, stoppingAtMissing: true)
    }

    private static func walk(_ path: String, stoppingAtMissing: Bool) throws(FileError) -> String? {
        var walk = try PathWalk(path)
        let euid = geteuid()
        try verifyPassedThrough("/", path: path, euid: euid)
        while let component = walk.next() {
            let candidate = walk.current == "/" ? "/" + component : walk.current + "/" + component
            var info = stat()
            guard lstat(candidate, &info) == 0 else {
                if stoppingAtMissing && errno == ENOENT { return candidate }
                throw walk.isLast ? .last("use report directory", path) : .last("check parent directory", candidate)
            }
            if walk.isLast {
                try verifyEntry(candidate == path ? path : candidate, info, requested: path)
                return nil
            }
            switch info.st_mode & S_IFMT {
            case S_IFLNK:
                guard info.st_uid == 0 || info.st_uid == euid else {
                    throw refusal(path, "the symbolic link \(candidate) on its way is owned by \(user(info.st_uid)), "
                        + "who could point it anywhere; use a path through directories owned by root or \(user(euid))")
                }
                try walk.follow(readLink(candidate), of: candidate, requested: path)
            case S_IFDIR:
                try verifyPassedThrough(candidate, path: path, euid: euid, info)
                walk.enter(component)
            default:
                throw FileError(path: candidate, operation: "check parent directory", errorNumber: ENOTDIR)
            }
        }
        // The walk ended on a directory it had entered already ("/", or a path ending in ".."): that one is the
        // directory itself.
        var info = stat()
        guard lstat(walk.current, &info) == 0 else { throw .last("use report directory", path) }
        try verifyEntry(walk.current, info, requested: path)
        return nil
    }

    /// A directory the path passes through (not the last component).
    private static func verifyPassedThrough(_ directory: String, path: String, euid: uid_t,
                                            _ known: stat? = nil) throws(FileError) {
        var info = known ?? stat()
        if known == nil, lstat(directory, &info) != 0 { throw .last("check parent directory", directory) }
        if info.st_uid != 0 && info.st_uid != euid {
            throw refusal(path, "its parent directory \(directory) is owned by \(user(info.st_uid)), who could "
                + "replace it; choose a directory under one owned by root or \(user(euid))")
        }
        if info.st_mode & (S_IWGRP | S_IWOTH) != 0 && info.st_mode & S_ISVTX == 0 {
            throw refusal(path, "its parent directory \(directory) is writable by other users without the sticky "
                + "bit (mode \(octal(info.st_mode))), so they could replace it")
        }
    }

    /// The directory itself, the last component of the walk.
    private static func verifyEntry(_ entry: String, _ info: stat, requested path: String) throws(FileError) {
        let euid = geteuid()
        switch info.st_mode & S_IFMT {
        case S_IFDIR: break
        case S_IFLNK:
            throw refusal(path, "it is a symbolic link (to \(linkTarget(entry))) owned by \(user(info.st_uid)), "
                + "which another user may have planted; point the configuration at the real directory")
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
        readLink(path) ?? "?"
    }

    private static func readLink(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: 4097)
        let count = readlink(path, &buffer, 4096)
        guard count > 0 else { return nil }
        return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// The components of a path still to be walked, and the directory reached so far (a real path: every component of
/// it was looked at, no link in it).
private struct PathWalk {
    /// Symbolic links followed before giving up, as the kernel's own limit (`ELOOP`).
    static let maximumLinks = 40

    private(set) var current = "/"
    /// Still to walk, last component first (popped from the end).
    private var remaining: [Substring]
    private var linksFollowed = 0
    /// Whether the component `next()` returned last is the path's final one.
    private(set) var isLast = false

    init(_ path: String) throws(FileError) {
        var absolute = path.isEmpty ? "." : path
        if !absolute.hasPrefix("/") {
            guard let directory = getcwd(nil, 0) else { throw .last("resolve working directory for", path) }
            absolute = String(cString: directory) + "/" + absolute
            free(directory)
        }
        remaining = Self.components(of: absolute).reversed()
    }

    private static func components(of path: String) -> [Substring] {
        path.split(separator: "/").filter { $0 != "." }
    }

    /// The next component to look at, or nil once the path is walked; `..` is taken here (the directory above
    /// `current` was walked through already).
    mutating func next() -> String? {
        while let component = remaining.popLast() {
            if component == ".." {
                current = AtomicFile.parentDirectory(of: current)
                continue
            }
            isLast = remaining.isEmpty
            return String(component)
        }
        return nil
    }

    /// `component` of `current` is a directory passed through.
    mutating func enter(_ component: String) {
        current = current == "/" ? "/" + component : current + "/" + component
    }

    /// `link` (in `current`) points at `target`: walk that instead.
    mutating func follow(_ target: String?, of link: String, requested path: String) throws(FileError) {
        linksFollowed += 1
        guard linksFollowed <= Self.maximumLinks, let target else {
            throw FileError(path: path, operation: "resolve", errorNumber: ELOOP,
                            detail: "too many symbolic links, or an unreadable one, on its way (at \(link))")
        }
        if target.hasPrefix("/") { current = "/" }
        remaining += Self.components(of: target).reversed()
    }
}
