import Foundation
import InMemoryLogging
import Logging
@testable import Stallmon
import StallmonLoop
import StallmonReport
import StallmonTestSupport
@testable import StallmonUpload
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Another local user must not steer where a service writes: a report directory (default or configured) planted by
/// someone else, with a symbolic link where the event log or the spool's lock file will go, is refused with an
/// error naming the path and its owner, and the link's target is never touched. These need root (to plant files as
/// a second user); unprivileged runs skip them with a printed reason.
@Suite(.serialized) struct FaultUntrustedDirectoryTests {
    /// The second user: `nobody` on Debian.
    static let otherUser: uid_t = 65534

    /// Planting files as a second user needs root (chown).
    static let needsRoot = "planting files as a second user needs root (chown)"

    /// A root-owned file with known contents, in a root-only directory, that a planted link points at.
    static func makeVictim(in directory: String, owner: uid_t = 0) throws -> (path: String, contents: String) {
        let path = directory + "/victim"
        let contents = "victim file: must never change\n"
        try contents.write(toFile: path, atomically: false, encoding: .utf8)
        chown(path, owner, gid_t(owner))
        return (path, contents)
    }

    /// What another user can do in a shared directory: create the report directory first, world-writable.
    static func plant(_ directory: String, links: [String: String]) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        for (name, target) in links {
            let parent = AtomicFile.parentDirectory(of: directory + "/" + name)
            try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true)
            try FileManager.default.createSymbolicLink(atPath: directory + "/" + name, withDestinationPath: target)
            lchown(directory + "/" + name, otherUser, gid_t(otherUser))
            if parent != directory { chown(parent, otherUser, gid_t(otherUser)); chmod(parent, 0o777) }
        }
        chown(directory, otherUser, gid_t(otherUser))
        chmod(directory, 0o777)
    }

    /// A root-owned victim file and, beside it, a report directory another user planted with `events.jsonl` linked
    /// to the victim, in a new directory `root` (the caller removes it).
    static func plantedReportDirectory() throws -> (root: String, victim: (path: String, contents: String),
                                                    reports: String) {
        let root = makeTemporaryDirectory()
        chmod(root, 0o755)
        let victim = try makeVictim(in: root)
        let reports = root + "/reports"
        try plant(reports, links: ["events.jsonl": victim.path])
        return (root, victim, reports)
    }

    @Test(.enabled(if: TestEnvironment.isRoot, Comment(rawValue: needsRoot)))
    func demoRefusesAConfiguredDirectoryPlantedByAnotherUser() async throws {
        let (root, victim, reports) = try Self.plantedReportDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let executable = try StallmonExecutable.url().path
        let output = root + "/demo.out"
        let status = try await offThePool {
            ChildProcess.run(executable, ["demo", "--seconds", "3", "--report-dir", reports],
                             timeout: .seconds(60), environment: StallmonExecutable.environment(), outputPath: output)
        }
        let printed = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        #expect(status == 1, "exit status \(String(describing: status)): \(printed)")
        #expect(printed.contains("refusing untrusted directory \(reports)"), "\(printed)")
        #expect(printed.contains("owned by uid 65534"), "names the owner: \(printed)")
        #expect(try String(contentsOfFile: victim.path, encoding: .utf8) == victim.contents, "the link was followed")
        // Before: a file literally named `stall-` was looked for, which never exists.
        let written = ((try? FileManager.default.contentsOfDirectory(atPath: reports)) ?? []).filter {
            $0.hasPrefix("stall-")  // (events.jsonl there is the planted link)
        }
        #expect(written.isEmpty, "nothing written: \(written)")
    }

    /// The default directory, `/var/tmp/stallmon-<uid>`, for a service user (a uid of its own, run with setpriv):
    /// another user created it first with the spool's lock file linked to a file that must not appear.
    @Test(.enabled(if: TestEnvironment.canActAsAnotherUser, "running stallmon as a service user needs root and setpriv"))
    func theDefaultDirectoryPlantedByAnotherUserIsRefused() async throws {
        let setpriv = try #require(TestEnvironment.setpriv)
        // A copy every user may run: the checkout itself may be private (it was skipped then, counted as passed).
        let (executable, copies) = try TestEnvironment.publicCopy(of: try StallmonExecutable.url().path)
        defer { try? FileManager.default.removeItem(atPath: copies) }
        let serviceUser: uid_t = 61_000 + uid_t(getpid() % 1000)
        let reports = "/var/tmp/stallmon-\(serviceUser)"
        try? FileManager.default.removeItem(atPath: reports)
        defer { try? FileManager.default.removeItem(atPath: reports) }
        let scratch = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        chmod(scratch, 0o777)
        let mustNotAppear = scratch + "/created-through-the-link"
        try Self.plant(reports, links: ["spool/.lock": mustNotAppear, "events.jsonl": mustNotAppear])
        let output = scratch + "/upload.out"
        let status = try await offThePool {
            ChildProcess.run(setpriv, ["--reuid=\(serviceUser)", "--regid=\(serviceUser)", "--clear-groups",
                                       executable, "upload", "--once", "--endpoint", "http://127.0.0.1:9/v1",
                                       "--deadline", "1"],
                             timeout: .seconds(60), environment: ["PATH": "/usr/bin:/bin"], outputPath: output)
        }
        let printed = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        #expect(status == 1, "exit status \(String(describing: status)): \(printed)")
        #expect(printed.contains("refusing untrusted directory \(reports)"), "\(printed)")
        #expect(printed.contains("owned by uid 65534"), "names the owner: \(printed)")
        #expect(!FileManager.default.fileExists(atPath: mustNotAppear), "the planted lock link was followed")
    }

    /// The library refuses too, when the monitor is created (directory planted before) and on every write (planted
    /// after the service started: the directory removed, by a cleaner of /var/tmp say, and re-created by someone
    /// else). The reports are dropped, the error names the owner, and the planted link's target is untouched.
    @Test(.enabled(if: TestEnvironment.isRoot, Comment(rawValue: needsRoot)))
    func theMonitorRefusesAtCreationAndOnEveryWrite() throws {
        let (root, victim, reports) = try Self.plantedReportDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        do {
            _ = try LooperStallMonitor(loop: try Looper(name: "untrusted-at-creation"),
                                       configuration: .init(detection: .init(threshold: .milliseconds(50)),
                                                            reports: .init(directory: reports)))
            Issue.record("a monitor was created on a planted directory")
        } catch {
            #expect("\(error)".contains("refusing untrusted directory \(reports)"), "\(error)")
            #expect("\(error)".contains("owned by uid 65534 (nobody)"), "\(error)")
        }

        try Self.removeTree(reports)
        let harness = try FaultDiskHarness(reportDirectory: reports, name: "untrusted-later")
        defer { harness.finish() }
        #expect(harness.stall(1))
        #expect(harness.statistics.reportsWritten == 1)
        try Self.removeTree(reports)
        try Self.plant(reports, links: ["events.jsonl": victim.path])
        #expect(harness.stall(2))
        #expect(harness.statistics.reportsWritten == 1, "a report was written into the planted directory")
        #expect(harness.statistics.reportsDropped >= 2)
        #expect(harness.keepsTicking(), "the loop kept running")
        #expect(try String(contentsOfFile: victim.path, encoding: .utf8) == victim.contents, "the link was followed")
        let logged = harness.logs.entries.map { "\($0.message) \($0.metadata)" }.joined(separator: "\n")
        #expect(logged.contains("owned by uid 65534"), "the error names the owner: \(logged)")
    }

    /// Issue 32 (1): a report directory that does not exist yet, under another user's link in a shared directory
    /// (`/var/tmp/app/reports` with `app` theirs, pointing at a root-only directory): nothing is created in the
    /// link's target, and the monitor refuses it at creation.
    @Test(.enabled(if: TestEnvironment.isRoot, Comment(rawValue: needsRoot)))
    func nothingIsCreatedThroughAnotherUsersLink() throws {
        let root = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        chmod(root, 0o755)
        let target = root + "/root-only"
        try FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: false,
                                                attributes: [.posixPermissions: 0o700])
        let shared = root + "/shared"
        try FileManager.default.createDirectory(atPath: shared, withIntermediateDirectories: false)
        chmod(shared, 0o1777)
        try FileManager.default.createSymbolicLink(atPath: shared + "/app", withDestinationPath: target)
        lchown(shared + "/app", Self.otherUser, gid_t(Self.otherUser))
        let reports = shared + "/app/reports"
        do {
            try AtomicFile.createDirectory(reports)
            Issue.record("a directory was created through another user's link")
        } catch {
            #expect("\(error)".contains("symbolic link \(shared)/app on its way is owned by uid 65534"), "\(error)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: target).isEmpty, "created in the link's target")
        #expect(throws: StallMonitorError.self, "accepted at creation") {
            _ = try LooperStallMonitor(loop: try Looper(name: "through-a-link"),
                                       configuration: .init(detection: .init(threshold: .milliseconds(50)),
                                                            reports: .init(directory: reports)))
        }
    }

    /// Removes `path` as a cleaner of /var/tmp would, while the monitor's writer may still be finishing its last
    /// report in it (its event line, the directory's fsync): a removal that races it is tried again (three times,
    /// 50 ms apart; a full run once saw EPERM here), and the last error is thrown.
    static func removeTree(_ path: String) throws {
        for attempt in 1...3 {
            do {
                try FileManager.default.removeItem(atPath: path)
                return
            } catch where attempt < 3 {
                usleep(50_000)
            }
        }
    }
}

/// Checks that need no second user: a directory of our own that is a symbolic link or world-writable, and links
/// inside a trusted directory (the event log, spool entries), are refused or skipped, never followed.
@Suite struct FaultUntrustedFileTests {
    @Test func aSymbolicLinkOrAWorldWritableDirectoryIsRefused() throws {
        let root = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let real = root + "/real"
        try AtomicFile.createDirectory(real)
        try FileManager.default.createSymbolicLink(atPath: root + "/link", withDestinationPath: real)
        #expect(throws: FileError.self) { try AtomicFile.createDirectory(root + "/link") }
        do {
            try DirectoryTrust.verify(root + "/link")
            Issue.record("a symbolic link was trusted as the directory")
        } catch {
            #expect("\(error)".contains("is a symbolic link (to \(real))"), "\(error)")
        }
        chmod(real, 0o777)
        do {
            try DirectoryTrust.verify(real)
            Issue.record("a world-writable directory was trusted")
        } catch {
            #expect("\(error)".contains("writable by other users (mode 0777)"), "\(error)")
        }
        chmod(real, 0o700)
        try DirectoryTrust.verify(real)
        // A parent others can write, without the sticky bit, is refused too.
        chmod(root, 0o777)
        defer { chmod(root, 0o755) }
        do {
            try DirectoryTrust.verify(real)
            Issue.record("a directory under a world-writable parent without the sticky bit was trusted")
        } catch {
            #expect("\(error)".contains("parent directory \(root) is writable by other users"), "\(error)")
        }
        chmod(root, 0o1777)
        try DirectoryTrust.verify(real)  // sticky, like /tmp: fine
    }

    /// Issue 32 (1): the path is walked one component at a time. A trailing slash (which makes `lstat` follow the
    /// link) changes nothing; a link of our own on the way is followed and its target walked; `..` and link loops
    /// are handled.
    @Test func everyComponentIsWalkedWhateverTheSpelling() throws {
        let root = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        chmod(root, 0o755)
        let real = root + "/real"
        try AtomicFile.createDirectory(real)
        try FileManager.default.createSymbolicLink(atPath: root + "/link", withDestinationPath: real)
        for spelling in ["/link/", "/link//", "/link/.", "/real/../link/"] {
            #expect(throws: FileError.self, "\(spelling) was trusted") { try DirectoryTrust.verify(root + spelling) }
        }
        // A link of our own further up leads to a directory walked like any other.
        try FileManager.default.createDirectory(atPath: real + "/reports", withIntermediateDirectories: false,
                                                attributes: [.posixPermissions: 0o700])
        try DirectoryTrust.verify(root + "/link/reports")
        try DirectoryTrust.verify(root + "/link/reports/")
        try DirectoryTrust.verify(root + "/real/../real/./reports")
        // ... and its target's directories are checked too: a world-writable one on the way is refused.
        chmod(real, 0o777)
        do {
            try DirectoryTrust.verify(root + "/link/reports")
            Issue.record("a directory under a world-writable target of a link was trusted")
        } catch {
            #expect("\(error)".contains("parent directory \(real) is writable by other users"), "\(error)")
        }
        chmod(real, 0o700)
        try FileManager.default.createSymbolicLink(atPath: root + "/loop-a", withDestinationPath: root + "/loop-b")
        try FileManager.default.createSymbolicLink(atPath: root + "/loop-b", withDestinationPath: root + "/loop-a")
        do {
            try DirectoryTrust.verify(root + "/loop-a/reports")
            Issue.record("a link loop was trusted")
        } catch {
            #expect(error.errorNumber == ELOOP, "\(error)")
        }
    }

    @Test func theEventLogNeverFollowsALink() throws {
        let root = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let reports = root + "/reports"
        try AtomicFile.createDirectory(reports)
        let target = root + "/target"
        try "keep\n".write(toFile: target, atomically: false, encoding: .utf8)
        try FileManager.default.createSymbolicLink(atPath: reports + "/events.jsonl", withDestinationPath: target)
        let log = EventLog(path: reports + "/events.jsonl", maxBytes: 1 << 20, maxFiles: 2)
        var event = StallEvent(time: "2026-11-24T00:00:00Z", event: "stall.begin")
        event.loop = "main"
        do {
            try log.append(event)
            Issue.record("appended through a symbolic link")
        } catch {
            #expect("\(error)".contains("refusing event log"), "\(error)")
        }
        #expect(try String(contentsOfFile: target, encoding: .utf8) == "keep\n")
    }

    @Test func theSpoolSendsNoLinkedEntry() throws {
        let root = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let spool = Spool(reportDirectory: root + "/reports")
        try spool.prepare()
        let secret = root + "/secret.json"
        try "{\"secret\": true}".write(toFile: secret, atomically: false, encoding: .utf8)
        try FileManager.default.createSymbolicLink(atPath: spool.pendingDirectory + "/stall-1.json",
                                                   withDestinationPath: secret)
        #expect(try spool.pending().isEmpty, "a symbolic link in pending/ was listed for upload")
        let read = ReportReader.readAll([spool.pendingDirectory + "/stall-1.json"], followingLinks: false)
        guard case .failure(let error) = read[0] else {
            Issue.record("read through a link")
            return
        }
        #expect(error.reason.contains("symbolic link"))
    }
}
