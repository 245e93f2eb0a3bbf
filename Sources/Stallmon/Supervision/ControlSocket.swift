import CStallmonCapture
import CStallmonLoopShims
import Foundation
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The control socket of a report directory: `<report_dir>/control-<pid>.sock`, an `AF_UNIX` stream socket on which
/// `stallmon snapshot PID` asks a running service for a snapshot of every monitored loop and pool, written as a
/// report (`kind: snapshot`). Only the service's own user may ask: the directory is 0700, the socket 0600, and the
/// peer's uid (SO_PEERCRED) must be the service's effective uid. One request at a time; a second waits its turn.
/// Its thread (`stallmon-control`) never touches a loop thread.
final class ControlSocket: Sendable {
    /// The socket's path for process `pid` in `directory`.
    static func path(directory: String, pid: Int32) -> String {
        (directory.hasSuffix("/") ? directory : directory + "/") + "control-\(pid).sock"
    }

    /// The one request, and the reply's first word.
    static let snapshotRequest = "snapshot"

    let path: String
    private let listener: Int32
    /// The socket file this one bound (device, inode), read right after bind: `stop()` removes the file at `path`
    /// only while it is still this one. A pipeline of the same directory started after this one left may have bound
    /// its own there already (it unlinks what no longer answers); removing that would leave it unreachable.
    private let boundFile: (device: UInt64, inode: UInt64)?
    private let runner = StoppableThread()
    private let stopping = Atomic<Bool>(false)
    /// The connection being answered (-1: none), for `stop()` to shut down: set before `stopping` is looked at and
    /// cleared before the descriptor is closed, under this lock, so `stop()` either sees it or is seen by `serve`, and
    /// never shuts down a number that was closed and reused.
    private let answering = Mutex<Int32>(-1)
    /// The snapshot reply `answer` waits for (nil: none), for `stop()` to end that wait; the same hand-over as
    /// `answering`.
    private let awaitedReply = Mutex<SnapshotReply?>(nil)

    /// Binds the socket in `directory` (which must exist, owned and 0700) and starts serving; nil (logged) when it
    /// cannot.
    static func start(directory: String, writer: ReportWriter, client: PipelineMember) -> ControlSocket? {
        let path = path(directory: directory, pid: getpid())
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else {
            client.logger.warning("stallmon: no control socket (snapshots on demand): \(String(cString: strerror(errno)))")
            return nil
        }
        // Right before anything is bound, removed or looked at there: the directory may have been created (by
        // another user) since the monitor checked it at creation.
        do {
            try DirectoryTrust.verify(directory)
        } catch {
            close(descriptor)
            client.logger.warning("stallmon: no control socket (snapshots on demand): \(error)")
            return nil
        }
        removeStaleSockets(in: directory)
        if ControlSocketClient.isAnswering(path) {
            // Another live process with this pid number (another pid namespace sharing the directory): not ours.
            close(descriptor)
            client.logger.warning("""
                stallmon: no control socket (snapshots on demand): \(path) is another live process's (a container \
                sharing the report directory?)
                """)
            return nil
        }
        unlink(path)  // a socket left by an earlier process of this pid (pids are reused)
        // The socket file takes the unbound socket's mode (less the umask) when bound: set here, on the descriptor,
        // never by path afterwards (a path can be swapped between bind and chmod).
        // A report directory whose path is too long for sun_path is reached through its descriptor: the socket is
        // bound at `path` all the same.
        let bound = fchmod(descriptor, 0o600) == 0
            ? UnixSocketAddress.reaching(path) { address in address.withSockaddr { bind(descriptor, $0, $1) } } ?? -1
            : -1
        guard bound == 0, listen(descriptor, 8) == 0 else {
            let reason = String(cString: strerror(errno))
            close(descriptor)
            unlink(path)
            client.logger.warning("stallmon: no control socket (snapshots on demand)",
                                  metadata: ["path": "\(path)", "error": "\(reason)"])
            return nil
        }
        let control = ControlSocket(path: path, listener: descriptor, boundFile: fileIdentity(path))
        guard control.runner.start(name: "stallmon-control", { control.serve(writer: writer, client: client) }) else {
            close(descriptor)
            unlink(path)
            client.logger.warning("stallmon: no control socket (snapshots on demand): the system refused its thread",
                                  metadata: ["path": "\(path)"])
            return nil
        }
        return control
    }

    /// Removes the sockets of processes that are gone (a crash, `hang_action = abort`, SIGKILL leave theirs) and no
    /// longer answer.
    private static func removeStaleSockets(in directory: String) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        for name in names where name.hasPrefix("control-") && name.hasSuffix(".sock") {
            guard let pid = Int32(name.dropFirst("control-".count).dropLast(".sock".count)), pid != getpid() else {
                continue
            }
            let path = (directory.hasSuffix("/") ? directory : directory + "/") + name
            if kill(pid, 0) != 0 && errno == ESRCH && !ControlSocketClient.isAnswering(path) { unlink(path) }
        }
    }

    private init(path: String, listener: Int32, boundFile: (device: UInt64, inode: UInt64)?) {
        self.path = path
        self.listener = listener
        self.boundFile = boundFile
    }

    /// The device and inode of the file at `path`, not following a symlink; nil when there is none.
    private static func fileIdentity(_ path: String) -> (device: UInt64, inode: UInt64)? {
        var info = stat()
        guard lstat(path, &info) == 0 else { return nil }
        return (UInt64(info.st_dev), UInt64(info.st_ino))
    }

    /// Stops serving and removes the socket, without waiting for the request in progress to run out its own timeouts
    /// (2 s to read the request, 2 s to send the reply, 10 s for the report writer): the accepted connection is shut
    /// down (a blocked recv or send returns at once), a wait for the writer's outcome is ended, and `answer` checks
    /// `stopping` before each step that can wait.
    ///
    /// The bound: what this can not cut short is a collection already under way (`SnapshotCoordinator.collect`, the
    /// watchdogs' answers): at most its 2 s, plus up to 2 s for each other report directory's control socket queued
    /// before it (the process answers one request at a time). So stop() takes at most 2 s + 2 s per other report
    /// directory in the process, plus microseconds (shutdowns, a join, a close, an unlink). In the usual case a
    /// collection under way is answered by the watchdog thread at its next pass, which the request woke: stop()
    /// returns as soon as that pass did.
    func stop() {
        // First, while it still answers: a pipeline of the directory starting now sees it live and leaves it, rather
        // than binding a file of its own there between this check and the unlink.
        if let boundFile, let present = Self.fileIdentity(path), present == boundFile { unlink(path) }
        stopping.store(true, ordering: .releasing)
        // Wakes the thread blocked in accept (which then fails): no polling while idle.
        shutdown(listener, Int32(SHUT_RDWR))
        answering.withLock { connection in
            if connection >= 0 { shutdown(connection, Int32(SHUT_RDWR)) }
        }
        awaitedReply.withLock { waiting in
            if let current = waiting { current.finish(.failure("the monitor is stopping")) }
        }
        runner.stop()
        close(listener)
    }

    private func serve(writer: ReportWriter, client: PipelineMember) {
        while !stopping.load(ordering: .acquiring) {
            let connection = cstallmon_accept_cloexec(listener)
            guard connection >= 0 else {
                if errno == EINTR || stopping.load(ordering: .acquiring) { continue }
                runner.wait(until: cstallmon_monotonic_ns() + 100_000_000)  // e.g. EMFILE: try again shortly
                continue
            }
            answering.withLock { $0 = connection }
            if !stopping.load(ordering: .acquiring) { answer(connection, writer: writer, client: client) }
            answering.withLock { $0 = -1 }
            close(connection)
        }
    }

    private func answer(_ connection: Int32, writer: ReportWriter, client: PipelineMember) {
        var timeout = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(connection, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let peer = cstallmon_socket_peer_uid(connection)
        guard peer == Int64(geteuid()) else {
            reply(connection, "error refused: the request came from uid \(peer), not this service's (uid \(geteuid()))")
            client.logger.warning("stallmon: refused a snapshot request from another user",
                                  metadata: ["uid": "\(peer)"])
            return
        }
        var buffer = [UInt8](repeating: 0, count: 64)
        let count = recv(connection, &buffer, buffer.count, 0)
        let request = count > 0 ? String(decoding: buffer[..<count], as: UTF8.self)
            .trimmingCharacters(in: .whitespacesAndNewlines) : ""
        guard request == Self.snapshotRequest else {
            reply(connection, "error unknown request (expected \(Self.snapshotRequest))")
            return
        }
        // Not begun once stopping: a collection is the one wait `stop()` cannot end.
        guard !stopping.load(ordering: .acquiring) else {
            reply(connection, "error the monitor is stopping")
            return
        }
        let (parts, missing) = Watchdog.process.snapshots.collect(timeout: .seconds(2))
        let outcome = SnapshotReply()
        awaitedReply.withLock { $0 = outcome }
        defer { awaitedReply.withLock { $0 = nil } }
        guard !stopping.load(ordering: .acquiring) else {
            reply(connection, "error the monitor is stopping")
            return
        }
        guard writer.submit(.snapshot(parts, missing: missing, reply: outcome), from: client) else {
            reply(connection, "error the report writer's queue is full")
            return
        }
        switch outcome.wait(timeout: .seconds(10)) {
        case .success(let path): reply(connection, "ok \(path)")
        case .failure(let reason): reply(connection, "error \(reason)")
        case nil: reply(connection, "error the report writer did not answer within 10 s")
        }
    }

    private func reply(_ connection: Int32, _ line: String) {
        let bytes = Array((line + "\n").utf8)
        _ = send(connection, bytes, bytes.count, Int32(MSG_NOSIGNAL))
    }
}
