import CStallmonLoopShims
import Foundation
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Feeds systemd's watchdog from loop health: `WATCHDOG=1` on `$NOTIFY_SOCKET` (the sd_notify protocol: one datagram
/// to an `AF_UNIX` socket, a path or, with a leading `@`, an abstract name) every half `$WATCHDOG_USEC` while no
/// stall of any monitor in the process is hung (`HangRegistry`), and nothing once one is, so systemd restarts the
/// service when `WatchdogSec=` passes; a `STATUS=` line says which loop hung, for how long, in what. One thread per
/// process, while at least one monitor that enables it runs. Never touches a loop thread.
final class SystemdNotifier: Sendable {
    /// What the environment says, parsed once per monitor start.
    struct Setup: Equatable, Sendable {
        /// The socket's address (`@name` for an abstract socket).
        var socket: String
        /// Between two pings.
        var interval: Duration
    }

    /// How `mode` and the environment decide: a setup, or nil (with a warning to log, if something was wrong).
    static func setup(mode: SystemdWatchdogMode, environment: [String: String] = ProcessInfo.processInfo.environment,
                      pid: Int32 = getpid()) -> (setup: Setup?, warning: String?) {
        guard mode != .off, let socket = environment["NOTIFY_SOCKET"], !socket.isEmpty else {
            if mode == .on {
                return (nil, "systemd_watchdog = on, but $NOTIFY_SOCKET is not set: nothing is sent")
            }
            return (nil, nil)
        }
        guard socket.hasPrefix("/") || socket.hasPrefix("@") else {
            return (nil, "$NOTIFY_SOCKET is neither a path nor an abstract name (@…): systemd's watchdog is not fed")
        }
        if let owner = environment["WATCHDOG_PID"], Int32(owner) != pid {
            // systemd's watchdog is someone else's (a parent that exec'd us without clearing it).
            return (nil, nil)
        }
        guard let text = environment["WATCHDOG_USEC"] else {
            return mode == .on ? (Setup(socket: socket, interval: .seconds(1)), nil) : (nil, nil)
        }
        guard let microseconds = UInt64(text), microseconds >= 2_000 else {
            return (nil, "$WATCHDOG_USEC is not a number of microseconds (at least 2000): \"\(text)\"; "
                + "systemd's watchdog is not fed")
        }
        return (Setup(socket: socket, interval: .microseconds(Int64(clamping: microseconds / 2))), nil)
    }

    /// The process's stalls in progress, whose hung ones stop the pings.
    private let hangs: HangRegistry

    /// A notifier that goes by `hangs` (the process's watchdog makes the one notifier: `Watchdog.process.systemd`).
    init(hangs: HangRegistry) {
        self.hangs = hangs
    }

    private struct State {
        var users = 0
        /// The running pinger: its own thread and stop token, so a stop racing a new start never stops the new one.
        var runner: StoppableThread?
    }

    private let state = Mutex<State>(State())

    /// Whether a notifier thread runs (the monitors then mark hung stalls).
    var isFeeding: Bool { state.withLock { $0.runner != nil } }

    /// A monitor with `configuration` starts: the notifier runs while at least one such monitor does.
    func retain(_ configuration: StallMonitorConfiguration, logger: Logger) -> Bool {
        let (setup, warning) = Self.setup(mode: configuration.hangs.systemdWatchdog)
        if let warning { logger.warning("stallmon: \(warning)") }
        guard let setup else { return false }
        return state.withLock { state in
            if state.runner == nil {
                let runner = StoppableThread()
                guard runner.start(name: "stallmon-sdnotify", { [self] in run(setup, runner: runner, logger: logger) })
                else {
                    logger.error("stallmon: cannot start the systemd watchdog thread; WATCHDOG=1 is not sent")
                    return false
                }
                state.runner = runner
            }
            state.users += 1
            return true
        }
    }

    /// A monitor that `retain`ed it stops.
    func release() {
        let stopping: StoppableThread? = state.withLock { state in
            state.users -= 1
            guard state.users <= 0 else { return nil }
            state.users = 0
            defer { state.runner = nil }
            return state.runner
        }
        stopping?.stop()
    }

    private func run(_ setup: Setup, runner: StoppableThread, logger: Logger) {
        var reportedHang: String?
        var failing = false
        let interval = UInt64(setup.interval.nanosecondsClamped)
        while !runner.isStopping {
            var message: String
            if let hung = hangs.oldestHung() {
                let seconds = Double(cstallmon_monotonic_ns() &- hung.since) / 1e9
                let status = "STATUS=loop \(hung.loop) stalled \(String(format: "%.1f", seconds)) s"
                    + (hung.topFrame.map { " in \($0)" } ?? "")
                // Said when it hangs; no WATCHDOG=1 from now on.
                message = reportedHang == nil ? status : ""
                reportedHang = status
            } else {
                message = "WATCHDOG=1"
                if reportedHang != nil {
                    message += "\nSTATUS=loops healthy"
                    reportedHang = nil
                }
            }
            if !message.isEmpty {
                if let error = Self.send(message, to: setup.socket) {
                    if !failing { logger.error("stallmon: cannot notify systemd: \(error)") }
                    failing = true
                } else {
                    failing = false
                }
            }
            // CLOCK_MONOTONIC: a wall-clock step (NTP) never delays a ping.
            runner.wait(until: cstallmon_monotonic_ns() + interval)
        }
    }

    /// Sends one sd_notify datagram. Returns nil, or what went wrong (never a secret: the socket's address only).
    static func send(_ message: String, to address: String) -> String? {
        let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { return "socket: \(String(cString: strerror(errno)))" }
        defer { close(descriptor) }
        guard let target = UnixSocketAddress(address) else { return "the socket address \(address) is too long" }
        let bytes = Array(message.utf8)
        let sent = target.withSockaddr { address, length in
            sendto(descriptor, bytes, bytes.count, Int32(MSG_NOSIGNAL), address, length)
        }
        return sent == bytes.count ? nil : "sendto \(address): \(String(cString: strerror(errno)))"
    }
}
