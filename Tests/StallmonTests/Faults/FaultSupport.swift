import CStallmonCapture
import Foundation
import Synchronization
import Testing
import StallmonLoop
@testable import Stallmon

/// The parent of every fault-injection suite. `.serialized` is inherited by the nested suites (declared in
/// extensions in the other files of this folder), so no two fault tests ever run at once: they spin CPUs, mount
/// file systems and kill processes, and must not perturb each other on a 2-core machine.
/// `swift test --filter Fault` selects them all (every test id contains `FaultTests`).
@Suite("Fault injection", .serialized)
struct FaultTests {}

// MARK: - Deterministic randomness

/// xorshift64*: tiny, fast, and the same sequence on every machine for a given seed.
struct FaultRandom: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) {
        state = seed == 0 ? 0x9E37_79B9_7F4A_7C15 : seed
    }

    mutating func next() -> UInt64 {
        state ^= state >> 12
        state ^= state << 25
        state ^= state >> 27
        return state &* 0x2545_F491_4F6C_DD1D
    }

    /// Uniform in 0..<bound (bound > 0).
    mutating func below(_ bound: Int) -> Int {
        precondition(bound > 0)
        return Int(next() % UInt64(bound))
    }

    /// Uniform in range.
    mutating func between(_ range: ClosedRange<Int>) -> Int {
        range.lowerBound + below(range.count)
    }

    mutating func chance(_ percent: Int) -> Bool { below(100) < percent }

    mutating func pick<T>(_ values: [T]) -> T { values[below(values.count)] }
}

// MARK: - Time

/// CLOCK_MONOTONIC nanoseconds.
func faultNow() -> UInt64 { cstallmon_monotonic_ns() }

func faultMilliseconds(since start: UInt64) -> Double { Double(faultNow() &- start) / 1e6 }

/// nanosleep that resumes after EINTR (sampling signals interrupt it).
func faultSleep(microseconds: Int) {
    var request = timespec(tv_sec: microseconds / 1_000_000, tv_nsec: (microseconds % 1_000_000) * 1000)
    var remaining = timespec()
    while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
}

// MARK: - The sampling signal

enum FaultSignal {
    /// Installs the process-wide sampling handler on the default signal, as every monitor of this process does
    /// (all monitors must share one signal). Balance with `cstallmon_release()`.
    static func install() throws -> Int32 {
        let number = try SamplingSignal.default.resolve()
        var message = [CChar](repeating: 0, count: 512)
        let status = cstallmon_install(number, &message, message.count)
        let text = String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        try #require(status == 0, "cstallmon_install failed: \(text)")
        return number
    }

    static func set(_ signalNumber: Int32) -> sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, signalNumber)
        return set
    }
}

/// Whether thread `tid` of this process still exists (its /proc entry goes when the kernel has released it, which
/// is also when tgkill starts failing with ESRCH).
func faultThreadExists(_ tid: Int32) -> Bool {
    access("/proc/self/task/\(tid)", F_OK) == 0
}

// MARK: - Threads that do hostile things

/// A thread that runs `iteration` in a loop until asked to stop, counting iterations as its progress. It unblocks
/// the sampling signal first (the mask of whoever created it must not hide it from the capture).
final class FaultThread: @unchecked Sendable {
    let name: String
    let tid = Atomic<Int32>(0)
    let progress = Atomic<Int>(0)
    let stopRequested = Atomic<Bool>(false)
    private let exited = DispatchSemaphore(value: 0)
    private let exitedFlag = Atomic<Bool>(false)

    init(name: String, unblocking signalNumber: Int32?, iteration: @escaping @Sendable (FaultThread) -> Void) {
        self.name = name
        let thread = Thread { [self] in
            if let signalNumber {
                var set = FaultSignal.set(signalNumber)
                pthread_sigmask(SIG_UNBLOCK, &set, nil)
            }
            tid.store(cstallmon_gettid(), ordering: .releasing)
            while !stopRequested.load(ordering: .acquiring) {
                iteration(self)
                progress.wrappingAdd(1, ordering: .relaxed)
            }
            exitedFlag.store(true, ordering: .releasing)
            exited.signal()
        }
        thread.name = name
        thread.start()
        let deadline = faultNow() + 5_000_000_000
        while tid.load(ordering: .acquiring) == 0 && faultNow() < deadline { usleep(500) }
    }

    var threadID: Int32 { tid.load(ordering: .acquiring) }

    /// Asks the thread to stop and waits (bounded) until its loop has returned. False if it did not.
    func stopAndWait(timeout: Duration = .seconds(5)) -> Bool {
        stopRequested.store(true, ordering: .releasing)
        if exitedFlag.load(ordering: .acquiring) { return true }
        let milliseconds = Int(timeout.milliseconds)
        return exited.wait(timeout: .now() + .milliseconds(milliseconds)) == .success
    }

    /// Whether the thread advances: its progress grows within `timeout`.
    func isMakingProgress(timeout: Duration = .seconds(5)) -> Bool {
        let before = progress.load(ordering: .relaxed)
        return eventually(timeout: timeout) { progress.load(ordering: .relaxed) > before + 2 }
    }
}

// MARK: - Child processes

/// A child process started with posix_spawn: empty signal mask and default dispositions (a child of a Swift test
/// thread would otherwise inherit a mask that hides signals), output to files, bounded waits.
final class FaultChild {
    let pid: pid_t
    let arguments: [String]
    private(set) var waitStatus: Int32?

    init(_ executable: String, _ arguments: [String], environment: [String: String],
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
        posix_spawn_file_actions_addopen(&actions, 2, stderrPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)

        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var child: pid_t = 0
        let status = posix_spawn(&child, executable, &actions, &attributes, argv, envp)
        guard status == 0 else {
            throw FaultError("posix_spawn \(executable): \(String(cString: strerror(status)))")
        }
        pid = child
    }

    /// Reaps the child if it has exited; true when it has.
    func poll() -> Bool {
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
    func wait(timeout: Duration) -> Bool {
        let deadline = faultNow() + UInt64(timeout.nanosecondsClamped)
        while !poll() {
            if faultNow() >= deadline { return false }
            usleep(2_000)
        }
        return true
    }

    /// SIGKILL and reap (SIGKILL cannot be caught or blocked, so the wait is short; bounded anyway).
    @discardableResult
    func kill() -> Bool {
        if poll() { return true }
        _ = Glibc.kill(pid, SIGKILL)
        return wait(timeout: .seconds(10))
    }

    var exitCode: Int32? {
        guard let status = waitStatus, status & 0x7F == 0 else { return nil }
        return (status >> 8) & 0xFF
    }

    var terminatingSignal: Int32? {
        guard let status = waitStatus else { return nil }
        let signal = status & 0x7F
        return signal != 0 && signal != 0x7F ? signal : nil
    }

    deinit {
        if waitStatus == nil { kill() }
    }

    /// Runs a command to completion (bounded); returns its exit code, or nil if it was killed or timed out.
    static func run(_ executable: String, _ arguments: [String], timeout: Duration = .seconds(60),
                    environment: [String: String] = ProcessInfo.processInfo.environment,
                    outputPath: String = "/dev/null") -> Int32? {
        guard let child = try? FaultChild(executable, arguments, environment: environment, stdoutPath: outputPath,
                                          stderrPath: outputPath) else { return nil }
        guard child.wait(timeout: timeout) else {
            child.kill()
            return nil
        }
        return child.exitCode
    }
}

struct FaultError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The first of `names` found in the usual binary directories.
func faultTool(_ names: String...) -> String? {
    for name in names {
        for directory in ["/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin"] {
            let path = "\(directory)/\(name)"
            if access(path, X_OK) == 0 { return path }
        }
    }
    return nil
}

// MARK: - Mounts

/// tmpfs and read-only bind mounts for the disk-trouble tests. Root in this container may mount; where it may not
/// (or FAULT_NO_MOUNT=1 is set, to exercise the fallbacks), `available` is false and the tests use fallbacks.
enum FaultMount {
    static let available: Bool = {
        if ProcessInfo.processInfo.environment["FAULT_NO_MOUNT"] == "1" { return false }
        guard geteuid() == 0, faultTool("mount") != nil, faultTool("umount") != nil else { return false }
        let probe = makeTemporaryDirectory("mountprobe")
        defer { try? FileManager.default.removeItem(atPath: probe) }
        guard mount(["-t", "tmpfs", "-o", "size=64k", "tmpfs", probe]) else { return false }
        return unmount(probe)
    }()

    @discardableResult
    static func mount(_ arguments: [String]) -> Bool {
        guard let tool = faultTool("mount") else { return false }
        return FaultChild.run(tool, arguments, timeout: .seconds(20)) == 0
    }

    @discardableResult
    static func unmount(_ path: String) -> Bool {
        guard let tool = faultTool("umount") else { return false }
        if FaultChild.run(tool, [path], timeout: .seconds(20)) == 0 { return true }
        return FaultChild.run(tool, ["-l", path], timeout: .seconds(20)) == 0  // busy: detach lazily
    }

    static func tmpfs(at path: String, size: String) -> Bool {
        mount(["-t", "tmpfs", "-o", "size=\(size),mode=0700", "tmpfs", path])
    }

    /// Mounts `source` at `target` read-only (a bind mount, then a read-only remount of it).
    static func bindReadOnly(_ source: String, at target: String) -> Bool {
        guard mount(["--bind", source, target]) else { return false }
        guard mount(["-o", "remount,bind,ro", target]) else {
            unmount(target)
            return false
        }
        return true
    }

    static func remount(_ target: String, readOnly: Bool) -> Bool {
        mount(["-o", "remount,bind,\(readOnly ? "ro" : "rw")", target])
    }
}

// MARK: - Files

/// Names in `directory` (empty when it cannot be listed).
func faultListing(_ directory: String) -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).sorted()
}

/// The lines of a JSON-lines file that end with a newline (complete writes), and the unterminated rest, if any.
func faultCompleteLines(_ path: String) -> (lines: [Substring], unterminatedTail: Int) {
    guard let data = FileManager.default.contents(atPath: path), !data.isEmpty else { return ([], 0) }
    let text = String(decoding: data, as: UTF8.self)
    var parts = text.split(separator: "\n", omittingEmptySubsequences: false)
    let tail = parts.removeLast()  // after the last newline: "" when the file ends with one
    return (parts, tail.utf8.count)
}
