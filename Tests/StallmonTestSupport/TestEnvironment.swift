import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// What the tests that act as a second user or mount file systems need. Those tests are disabled with Swift Testing's
/// own condition (`.enabled(if:)`, reported as skipped with the reason, never as passed), and under
/// `scripts/test.sh` as root or in CI (`REQUIRE_PRIVILEGED_TESTS=1`) a missing part fails
/// `RequiredEnvironmentTests` instead: CI cannot go green by skipping them.
public enum TestEnvironment {
    public static var isRoot: Bool { geteuid() == 0 }

    /// util-linux's setpriv, to run a process as another user.
    public static var setpriv: String? { findTool("setpriv") }

    /// Root with setpriv: a process of another user can be started.
    public static var canActAsAnotherUser: Bool { isRoot && setpriv != nil }

    /// Whether the suite must have these (scripts/test.sh sets it as root or in CI).
    public static var privilegedTestsRequired: Bool {
        ProcessInfo.processInfo.environment["REQUIRE_PRIVILEGED_TESTS"] == "1"
    }

    /// What is missing of what the privileged tests need.
    public static var missingForPrivilegedTests: [String] {
        var missing: [String] = []
        if !isRoot { missing.append("root (euid 0)") }
        if setpriv == nil { missing.append("setpriv (util-linux)") }
        return missing
    }

    /// A copy of `executable` that every user may run (0755 in a 0755 directory under /tmp): a checkout is often
    /// private (0700), and a test acting as another user must still run stallmon. The caller removes `directory`.
    public static func publicCopy(of executable: String) throws -> (path: String, directory: String) {
        let directory = "/tmp/stallmon-public-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false,
                                                attributes: [.posixPermissions: 0o755])
        let path = directory + "/" + URL(fileURLWithPath: executable).lastPathComponent
        try FileManager.default.copyItem(atPath: executable, toPath: path)
        chmod(directory, 0o755)
        chmod(path, 0o755)
        return (path, directory)
    }
}
