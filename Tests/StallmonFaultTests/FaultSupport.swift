import CStallmonCapture
import CStallmonLoopShims
import Foundation
@testable import Stallmon
import StallmonLoop
@testable import StallmonReport
import StallmonTestSupport
@testable import StallmonUpload
import Synchronization
import Testing

/// The parent of every fault-injection suite. `.serialized` is inherited by the nested suites (declared in
/// extensions in the other files of this folder), so no two fault tests ever run at once: they spin CPUs, mount
/// file systems and kill processes, and must not perturb each other on a 2-core machine.
/// `swift test --filter Fault` selects them all (every test id contains `FaultTests`).
@Suite("Fault injection", .serialized)
struct FaultTests {}

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

/// Whether `signal` is pending for thread `tid` of this process (its `SigPnd` mask in /proc): sent, not yet handled.
func faultSignalPending(_ signal: Int32, tid: Int32) -> Bool {
    guard let status = try? String(contentsOfFile: "/proc/self/task/\(tid)/status", encoding: .utf8),
          let line = status.split(separator: "\n").first(where: { $0.hasPrefix("SigPnd:") }),
          let mask = UInt64(line.dropFirst("SigPnd:".count).trimmingCharacters(in: .whitespaces), radix: 16)
    else { return false }
    return signal >= 1 && signal <= 64 && mask & (1 << UInt64(signal - 1)) != 0
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

struct FaultError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

// MARK: - Mounts

/// tmpfs and read-only bind mounts for the disk-trouble tests. Root in this container may mount; where it may not
/// (or FAULT_NO_MOUNT=1 is set, to exercise the fallbacks), `available` is false and the tests use fallbacks.
enum FaultMount {
    static let available: Bool = {
        if ProcessInfo.processInfo.environment["FAULT_NO_MOUNT"] == "1" { return false }
        guard geteuid() == 0, findTool("mount") != nil, findTool("umount") != nil else { return false }
        let probe = makeTemporaryDirectory("mountprobe")
        defer { try? FileManager.default.removeItem(atPath: probe) }
        guard mount(["-t", "tmpfs", "-o", "size=64k", "tmpfs", probe]) else { return false }
        return unmount(probe)
    }()

    @discardableResult
    static func mount(_ arguments: [String]) -> Bool {
        guard let tool = findTool("mount") else { return false }
        return ChildProcess.run(tool, arguments, timeout: .seconds(20)) == 0
    }

    @discardableResult
    static func unmount(_ path: String) -> Bool {
        guard let tool = findTool("umount") else { return false }
        if ChildProcess.run(tool, [path], timeout: .seconds(20)) == 0 { return true }
        return ChildProcess.run(tool, ["-l", path], timeout: .seconds(20)) == 0  // busy: detach lazily
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

/// The mount-based fault tests are required where the privileged tests are (scripts/test.sh as root or in CI).
struct RequiredMountTests {
    @Test(.enabled(if: TestEnvironment.privilegedTestsRequired, "REQUIRE_PRIVILEGED_TESTS is not set"))
    func mountsCanBeMade() {
        #expect(FaultMount.available, "mount and umount of a tmpfs as root (util-linux mount)")
    }
}
