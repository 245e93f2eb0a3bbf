import CStallmonLoopShims
import Foundation
import InMemoryLogging
import Logging
@testable import Stallmon
import StallmonLoop
import StallmonTestSupport
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Issue 32 (2): the control socket is bound only in a directory that passes the trust check right before binding,
/// its mode is set on the descriptor (never by path), no listener can hold up a monitor's start, and the client
/// reads a bounded reply within its timeout.
@Suite(.serialized)
struct ControlSocketTrustTests {
    static let nobody: uid_t = 65534

    /// A monitor on a new `Looper` writing to `reports`, logging into `logs`.
    static func monitor(_ reports: String, _ logs: InMemoryLogHandler, name: String) throws -> LooperStallMonitor {
        try LooperStallMonitor(loop: try Looper(name: name),
                               configuration: .init(detection: .init(threshold: .milliseconds(50)),
                                                    reports: .init(directory: reports)),
                               logger: Logger(label: "control-trust") { _ in logs })
    }

    /// Runs `body` on a thread of its own; false when it has not returned within `timeout` (the thread is left).
    static func returns(within timeout: Duration, _ body: @escaping @Sendable () -> Void) -> Bool {
        let done = DispatchSemaphore(value: 0)
        Thread {
            body()
            done.signal()
        }.start()
        return done.wait(timeout: .now() + .nanoseconds(Int(timeout.components.seconds) * 1_000_000_000)) == .success
    }

    @Test(.enabled(if: TestEnvironment.isRoot, "creating the directory as a second user needs root (chown)"))
    func aDirectoryAnotherUserCreatedBeforeStartGetsNoSocket() throws {
        let root = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        chmod(root, 0o1777)  // a shared directory, like /var/tmp
        let victim = root + "/victim"
        try "root's file\n".write(toFile: victim, atomically: false, encoding: .utf8)
        chmod(victim, 0o644)
        let reports = root + "/reports"
        let logs = InMemoryLogHandler()
        let monitor = try Self.monitor(reports, logs, name: "control-planted")  // absent now: accepted
        // Between the monitor's creation and its start, another user creates the directory, with a link at the
        // socket's name.
        mkdir(reports, 0o777)
        chmod(reports, 0o777)
        chown(reports, Self.nobody, Self.nobody)
        let socketPath = reports + "/control-\(getpid()).sock"
        symlink(victim, socketPath)
        lchown(socketPath, Self.nobody, Self.nobody)
        monitor.start()
        defer { monitor.stop() }
        var info = stat()
        #expect(lstat(socketPath, &info) == 0 && info.st_mode & S_IFMT == S_IFLNK, "the planted link was replaced")
        #expect(try FileManager.default.contentsOfDirectory(atPath: reports) == ["control-\(getpid()).sock"],
                "nothing was created in the planted directory")
        #expect(stat(victim, &info) == 0 && info.st_mode & 0o777 == 0o644, "the link's target changed mode")
        let logged = logs.entries.map { "\($0.message)" }.joined(separator: "\n")
        #expect(logged.contains("no control socket") && logged.contains("refusing untrusted directory \(reports)"),
                "\(logged)")
    }

    /// A listening socket that never accepts, with its backlog full, named as a dead process's: `start()` used to
    /// connect to it with a blocking `connect` and never return.
    @Test func aListenerThatNeverAcceptsCannotHoldUpStart() throws {
        let root = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let reports = root + "/reports"
        try AtomicFile.createDirectory(reports)
        let dead = try Self.deadProcessID()
        let stale = reports + "/control-\(dead).sock"
        let listener = try Self.listenerWithAFullBacklog(at: stale)
        defer { for descriptor in listener { close(descriptor) } }
        let logs = InMemoryLogHandler()
        let monitor = try Self.monitor(reports, logs, name: "control-full-backlog")
        #expect(Self.returns(within: .seconds(10)) { monitor.start() }, "start() waited for a listener")
        defer { monitor.stop() }
        #expect(FileManager.default.fileExists(atPath: stale), "a socket someone still listens on is not removed")
        var info = stat()
        let own = reports + "/control-\(getpid()).sock"
        #expect(lstat(own, &info) == 0 && info.st_mode & S_IFMT == S_IFSOCK, "the monitor's own socket is bound")
        #expect(info.st_mode & 0o777 == 0o600, "mode \(String(info.st_mode & 0o777, radix: 8))")
        // The client gives up on such a listener too, within its timeout.
        let started = cstallmon_monotonic_ns()
        let outcome = ControlSocketClient.requestSnapshot(at: stale, timeout: .seconds(1))
        #expect(cstallmon_monotonic_ns() - started < 5_000_000_000)
        guard case .failure(let reason) = outcome else {
            Issue.record("a snapshot from a listener that never accepts: \(outcome)")
            return
        }
        #expect(reason.contains("backlog is full"), "\(reason)")
    }

    /// The client reads one line of at most `maximumReplyBytes`, within its timeout as a whole.
    @Test func theClientReadsABoundedReplyWithinItsTimeout() throws {
        let root = makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        for behaviour in [PeerBehaviour.floods, .dribbles] {
            let path = root + "/peer-\(behaviour).sock"
            let peer = try FakePeer(path: path, behaviour: behaviour)
            defer { peer.stop() }
            let started = cstallmon_monotonic_ns()
            let outcome = ControlSocketClient.requestSnapshot(at: path, timeout: .seconds(2))
            let elapsed = Double(cstallmon_monotonic_ns() - started) / 1e9
            #expect(elapsed < 4, "\(behaviour): \(elapsed) s")
            guard case .failure(let reason) = outcome else {
                Issue.record("\(behaviour): \(outcome)")
                continue
            }
            switch behaviour {
            case .floods: #expect(reason.contains("longer than"), "\(reason)")
            case .dribbles: #expect(reason.contains("no answer"), "\(reason)")
            }
        }
    }

    // MARK: - Helpers

    /// The pid of a process that has ended (and been reaped).
    static func deadProcessID() throws -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/true")
        try process.run()
        process.waitUntilExit()
        return process.processIdentifier
    }

    /// A socket listening at `path` with a backlog of one, filled; returns every descriptor (the caller closes them).
    static func listenerWithAFullBacklog(at path: String) throws -> [Int32] {
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard let address = UnixSocketAddress(path),
              address.withSockaddr({ bind(listener, $0, $1) }) == 0, listen(listener, 0) == 0 else {
            throw POSIXError(.EADDRNOTAVAIL)
        }
        var descriptors = [listener]
        for _ in 0..<16 {
            let client = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            descriptors.append(client)
            if address.withSockaddr({ connect(client, $0, $1) }) != 0 && errno == EAGAIN { return descriptors }
        }
        throw POSIXError(.EAGAIN)
    }

    enum PeerBehaviour: CustomStringConvertible {
        /// 64 KiB without a newline, then waits.
        case floods
        /// A byte every 300 ms, never a newline.
        case dribbles

        var description: String { self == .floods ? "floods" : "dribbles" }
    }

    /// A server at `path` that answers every connection as `behaviour` says, until stopped.
    final class FakePeer: Sendable {
        private let listener: Int32
        private let state = State()
        private final class State: Sendable {
            let stopping = Atomic<Bool>(false)
            let finished = DispatchSemaphore(value: 0)
        }

        init(path: String, behaviour: PeerBehaviour) throws {
            let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
            guard let address = UnixSocketAddress(path),
                  address.withSockaddr({ bind(listener, $0, $1) }) == 0, listen(listener, 4) == 0 else {
                throw POSIXError(.EADDRNOTAVAIL)
            }
            self.listener = listener
            let state = state
            Thread {
                defer { state.finished.signal() }
                let connection = accept(listener, nil, nil)
                guard connection >= 0 else { return }
                defer { close(connection) }
                switch behaviour {
                case .floods:
                    let bytes = [UInt8](repeating: UInt8(ascii: "x"), count: 65536)
                    _ = send(connection, bytes, bytes.count, Int32(MSG_NOSIGNAL))
                    while !state.stopping.load(ordering: .relaxed) { usleep(50_000) }
                case .dribbles:
                    while !state.stopping.load(ordering: .relaxed) {
                        _ = send(connection, "x", 1, Int32(MSG_NOSIGNAL))
                        usleep(300_000)
                    }
                }
            }.start()
        }

        func stop() {
            state.stopping.store(true, ordering: .relaxed)
            shutdown(listener, Int32(SHUT_RDWR))
            _ = state.finished.wait(timeout: .now() + 5)
            close(listener)
        }
    }
}
