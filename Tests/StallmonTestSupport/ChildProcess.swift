import Foundation
import Glibc
import StallmonLoop

/// A child process started with posix_spawn: empty signal mask and default dispositions (a child of a Swift test
/// thread would otherwise inherit a mask that hides signals), output to files, bounded waits.
public final class ChildProcess {
    public let pid: pid_t
    public let arguments: [String]
    public private(set) var waitStatus: Int32?

    public init(_ executable: String, _ arguments: [String], environment: [String: String],
         stdoutPath: String = "/dev/null", stderrPath: String = "/dev/null") throws {
        self.arguments = arguments
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigfillset(&defaults)
        sigdelset(&defaults, SIGKILL)
        sigdelset(&defaults, SIGSTOP)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, stdoutPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        if stderrPath == stdoutPath && stdoutPath != "/dev/null" {
            posix_spawn_file_actions_adddup2(&actions, 1, 2)  // one file description: no overwriting each other
        } else {
            posix_spawn_file_actions_addopen(&actions, 2, stderrPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        }

        // Nothing else this process has open reaches the child: a long-lived child holding a descriptor of
        // Foundation's `Process` (the socket it watches for a child's exit) would keep another test's `Process`
        // "running" until this child exits, and that test would time out.
        // (glibc 2.34+; Swift's Glibc module does not declare it, so it is looked up.)
        if let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") {
            typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
            _ = unsafeBitCast(symbol, to: CloseFrom.self)(&actions, 3)
        }

        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var child: pid_t = 0
        let status = posix_spawn(&child, executable, &actions, &attributes, argv, envp)
        guard status == 0 else {
            throw ChildProcessError(description: "posix_spawn \(executable): \(String(cString: strerror(status)))")
        }
        pid = child
    }

    /// Reaps the child if it has exited; true when it has.
    public func poll() -> Bool {
        if waitStatus != nil { return true }
        var status: Int32 = 0
        let result = waitpid(pid, &status, WNOHANG)
        if result == pid {
            waitStatus = status
            return true
        }
        return false
    }

    /// Waits until the child exits or `timeout` passes; false on timeout.
    public func wait(timeout: Duration) -> Bool {
        let deadline = MonotonicInstant.now().advanced(by: timeout)
        while !poll() {
            if MonotonicInstant.now() >= deadline { return false }
            usleep(2_000)
        }
        return true
    }

    /// SIGKILL and reap (SIGKILL cannot be caught or blocked, so the wait is short; bounded anyway).
    @discardableResult
    public func kill() -> Bool {
        if poll() { return true }
        _ = Glibc.kill(pid, SIGKILL)
        return wait(timeout: .seconds(10))
    }

    public var exitCode: Int32? {
        guard let status = waitStatus, status & 0x7F == 0 else { return nil }
        return (status >> 8) & 0xFF
    }

    public var terminatingSignal: Int32? {
        guard let status = waitStatus else { return nil }
        let signal = status & 0x7F
        return signal != 0 && signal != 0x7F ? signal : nil
    }

    deinit {
        if waitStatus == nil { kill() }
    }

    /// Runs a command to completion (bounded); returns its exit code, or nil if it was killed or timed out.
    public static func run(_ executable: String, _ arguments: [String], timeout: Duration = .seconds(60),
                    environment: [String: String] = ProcessInfo.processInfo.environment,
                    outputPath: String = "/dev/null") -> Int32? {
        guard let child = try? ChildProcess(executable, arguments, environment: environment, stdoutPath: outputPath,
                                          stderrPath: outputPath) else { return nil }
        guard child.wait(timeout: timeout) else {
            child.kill()
            return nil
        }
        return child.exitCode
    }
}

/// The first of `names` found in the usual binary directories.
public func findTool(_ names: String...) -> String? {
    for name in names {
        for directory in ["/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin"] {
            let path = "\(directory)/\(name)"
            if access(path, X_OK) == 0 { return path }
        }
    }
    return nil
}

/// A child process could not be started.
public struct ChildProcessError: Error, CustomStringConvertible {
    public let description: String

    public init(description: String) {
        self.description = description
    }
}

/// Runs blocking work (waiting for a child process, a build) on a thread of its own, so it does not hold one of
/// Swift Concurrency's few cooperative threads, which the async tests running beside it need to make progress.
/// Record expectations after it returns: `#expect` on another thread has no current test.
public func offThePool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread {
            do {
                continuation.resume(returning: try body())
            } catch {
                continuation.resume(throwing: error)
            }
        }
    }
}
