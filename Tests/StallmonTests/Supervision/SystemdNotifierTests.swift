import Foundation
@testable import Stallmon
import StallmonReport
import StallmonTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A real `AF_UNIX` datagram socket, as systemd's `$NOTIFY_SOCKET`: bound to a path, or to an abstract name (`@…`).
final class NotifySocket: @unchecked Sendable {
    let descriptor: Int32
    /// The address to put in `$NOTIFY_SOCKET`.
    let address: String

    init(abstract: Bool) throws {
        descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw POSIXError(.EIO) }
        let name = "stallmon-notify-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        address = abstract ? "@" + name : NSTemporaryDirectory() + name + ".sock"
        guard let local = UnixSocketAddress(address), local.withSockaddr({ bind(descriptor, $0, $1) }) == 0 else {
            throw POSIXError(.EADDRINUSE)
        }
    }

    deinit {
        close(descriptor)
        if address.hasPrefix("/") { unlink(address) }
    }

    /// The datagrams received within `timeout`, each with when it arrived (CLOCK_MONOTONIC ns).
    func receive(for timeout: Duration) -> [(at: UInt64, text: String)] {
        var received: [(UInt64, String)] = []
        let end = ContinuousClock.now + timeout
        var buffer = [UInt8](repeating: 0, count: 4096)
        while ContinuousClock.now < end {
            let left = end - ContinuousClock.now
            var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            let milliseconds = Int32(max(1, left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000))
            guard poll(&poller, 1, milliseconds) > 0 else { continue }
            let count = recv(descriptor, &buffer, buffer.count, 0)
            if count > 0 { received.append((cstallmon_monotonic_ns_for_tests(), String(decoding: buffer[..<count], as: UTF8.self))) }
        }
        return received
    }
}

func cstallmon_monotonic_ns_for_tests() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}

@Suite(.serialized)
struct SystemdNotifierTests {
    @Test func whatTheEnvironmentAndTheSettingDecide() {
        let pid = getpid()
        let socket = ["NOTIFY_SOCKET": "/run/systemd/notify"]
        // Nothing without $NOTIFY_SOCKET, whatever the setting.
        for mode in SystemdWatchdogMode.allCases where mode != .on {
            #expect(SystemdNotifier.setup(mode: mode, environment: ["WATCHDOG_USEC": "2000000"], pid: pid).setup == nil)
        }
        #expect(SystemdNotifier.setup(mode: .on, environment: [:], pid: pid).warning?.contains("NOTIFY_SOCKET") == true)
        // auto: only when systemd asked for a watchdog.
        #expect(SystemdNotifier.setup(mode: .auto, environment: socket, pid: pid).setup == nil)
        let asked = socket.merging(["WATCHDOG_USEC": "2000000"]) { $1 }
        #expect(SystemdNotifier.setup(mode: .auto, environment: asked, pid: pid).setup
                == .init(socket: "/run/systemd/notify", interval: .seconds(1)))
        #expect(SystemdNotifier.setup(mode: .off, environment: asked, pid: pid).setup == nil)
        #expect(SystemdNotifier.setup(mode: .on, environment: socket, pid: pid).setup?.interval == .seconds(1))
        // Someone else's watchdog.
        let other = asked.merging(["WATCHDOG_PID": String(pid + 1)]) { $1 }
        #expect(SystemdNotifier.setup(mode: .auto, environment: other, pid: pid).setup == nil)
        let ours = asked.merging(["WATCHDOG_PID": String(pid)]) { $1 }
        #expect(SystemdNotifier.setup(mode: .auto, environment: ours, pid: pid).setup != nil)
        // A bad $WATCHDOG_USEC: a clear warning, nothing sent, no crash.
        for bad in ["", "abc", "-5", "10", "99999999999999999999999"] {
            let (setup, warning) = SystemdNotifier.setup(mode: .auto, environment: socket.merging(["WATCHDOG_USEC": bad]) { $1 },
                                                         pid: pid)
            #expect(setup == nil && warning?.contains("WATCHDOG_USEC") == true, "\(bad): \(String(describing: warning))")
        }
        #expect(SystemdNotifier.setup(mode: .auto, environment: ["NOTIFY_SOCKET": "relative", "WATCHDOG_USEC": "2000000"],
                                      pid: pid).warning != nil)
    }

    @Test(arguments: [false, true])
    func aDatagramReachesAPathOrAnAbstractSocket(_ abstract: Bool) throws {
        let socket = try NotifySocket(abstract: abstract)
        #expect(SystemdNotifier.send("WATCHDOG=1", to: socket.address) == nil)
        let received = socket.receive(for: .milliseconds(200))
        #expect(received.map(\.text) == ["WATCHDOG=1"])
        #expect(SystemdNotifier.send("WATCHDOG=1", to: "/nonexistent/notify.sock")?.contains("sendto") == true)
    }
}

/// `stallmon demo` under a systemd-like environment: a real notify socket, `$WATCHDOG_USEC` of 200 ms (a ping every
/// 100 ms), `systemd_hang_after_ms` of 1 s, and 1.5 s stalls: pings stop once a stall passes 1 s (its report durable
/// first, with a `STATUS=` line naming the loop and the function), and resume when it ends.
@Suite(.serialized)
struct SystemdWatchdogEndToEndTests {
    @Test func pingsStopWhileALoopIsHungAndResumeAfter() throws {
        let notify = try NotifySocket(abstract: false)
        let root = makeTemporaryDirectory("systemd-watchdog")
        let reports = root + "/reports"
        let child = try ChildProcess(
            try StallmonExecutable.url().path,
            ["demo", "--seconds", "30", "--stalls", "cpu", "--threshold-ms", "600", "--report-dir", reports],
            environment: StallmonExecutable.environment([
                "NOTIFY_SOCKET": notify.address, "WATCHDOG_USEC": "200000", "STALLMON_SYSTEMD_HANG_AFTER_MS": "1000",
            ]), stdoutPath: root + "/out", stderrPath: root + "/err")
        defer { child.kill() }
        // Until the second stall has begun: the first (0.5 s → 2.0 s after start) hangs at 1.5 s and ends at 2.0 s.
        // The pings stop only once the hang's report is durable, which a loaded machine's writer (cold
        // symbolication, fsyncs) may take some hundreds of ms to make: what is checked below is the order of
        // events against the stall's own clock (its report), not a margin of time.
        var received: [(at: UInt64, text: String)] = []
        var hangReportBeforeStatus: Bool?
        var buffer = [UInt8](repeating: 0, count: 4096)
        let end = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < end {
            var poller = pollfd(fd: notify.descriptor, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 50) > 0 else { continue }
            let count = recv(notify.descriptor, &buffer, buffer.count, 0)
            guard count > 0 else { continue }
            let text = String(decoding: buffer[..<count], as: UTF8.self)
            received.append((cstallmon_monotonic_ns_for_tests(), text))
            if text.hasPrefix("STATUS=loop"), hangReportBeforeStatus == nil {
                // The report must be on disk before the pings stop.
                let names = (try? FileManager.default.contentsOfDirectory(atPath: reports)) ?? []
                hangReportBeforeStatus = names.contains { name in
                    guard name.hasPrefix("stall-"), name.hasSuffix(".json"),
                          let report = try? ReportReader.read(reports + "/" + name) else { return false }
                    return report.hang?.action == "watchdog"
                }
            }
            if received.filter({ $0.text.contains("STATUS=loops healthy") }).count >= 1,
               received.last?.text == "WATCHDOG=1", received.suffix(3).allSatisfy({ $0.text == "WATCHDOG=1" }) { break }
        }
        let errors = (try? String(contentsOfFile: root + "/err", encoding: .utf8)) ?? ""
        let texts = received.map(\.text)
        #expect(texts.prefix(3).allSatisfy { $0 == "WATCHDOG=1" }, "pings while healthy: \(texts.prefix(5)) \(errors)")
        let hung = try #require(received.firstIndex { $0.text.hasPrefix("STATUS=loop") }, "\(texts) \(errors)")
        let status = received[hung].text
        #expect(status.contains("loop demo-main stalled") && status.contains("crunchPrimes"), "\(status)")
        #expect(hangReportBeforeStatus == true, "the hang's report was durable before the pings stopped")
        let resumed = try #require(received.firstIndex { $0.text.contains("STATUS=loops healthy") }, "\(texts)")
        #expect(resumed > hung)
        #expect(received[resumed].text.hasPrefix("WATCHDOG=1"), "pings resume with the recovery")
        // No ping between the hang and the recovery: the hang was declared only after 1 s of the stall, and the
        // recovery came only once the stall had ended (the report's start and duration, CLOCK_MONOTONIC as here).
        #expect(received[(hung + 1)..<resumed].allSatisfy { !$0.text.contains("WATCHDOG=1") }, "\(texts)")
        let hungReport = eventually(timeout: .seconds(10)) {
            readReports(reports).contains { !$0.ongoing && $0.durationMs >= 1000 }
        }
        if hungReport, let stall = readReports(reports).first(where: { !$0.ongoing && $0.durationMs >= 1000 }) {
            let stallStart = stall.start.monotonicNs
            let stallEnd = stallStart + UInt64(stall.durationMs * 1e6)
            let slack: UInt64 = 20_000_000
            #expect(received[hung].at + slack >= stallStart + 1_000_000_000, "the hang came 1 s into the stall")
            #expect(received[resumed].at + slack >= stallEnd,
                    "the pings resumed \(Double(Int64(stallEnd) - Int64(received[resumed].at)) / 1e6) ms early")
        } else {
            Issue.record("no final report of the hung stall: \(readReports(reports).map(\.durationMs))")
        }
        // The last ping before the hang came within an interval (plus the hang's report) of the stall's 1 s mark.
        if hung > 0 {
            let lastPing = received[..<hung].last { $0.text == "WATCHDOG=1" }
            #expect(lastPing != nil)
        }
        // Waiting for the hang's report to be durable is the watchdog's own work, not a freeze (issue 32, item 4).
        let log = (try? String(contentsOfFile: reports + "/events.jsonl", encoding: .utf8)) ?? ""
        #expect(!log.contains("process.frozen"), "nobody stopped the process: \(log)")
        #expect(readReports(reports).allSatisfy { ($0.frozenMs ?? 0) == 0 }, "\(readReports(reports).map(\.frozenMs))")
    }

    /// Issue 32, item 4, as reported: `demo --stalls hang` under systemd's watchdog (100 ms threshold, hung at 1 s, an
    /// interim report at 2 s). The pass that waited for the hang's report to be durable was taken for a freeze
    /// (`process.frozen` lines, its time subtracted as `frozenMs`), and the interim that replaced the hang's report
    /// on disk had lost `hang`.
    @Test func aHungLoopIsNotFrozenAndItsInterimKeepsTheHang() throws {
        let notify = try NotifySocket(abstract: false)
        let root = makeTemporaryDirectory("systemd-hang")
        let reports = root + "/reports"
        let child = try ChildProcess(
            try StallmonExecutable.url().path, ["demo", "--seconds", "30", "--stalls", "hang", "--report-dir", reports],
            environment: StallmonExecutable.environment([
                "NOTIFY_SOCKET": notify.address, "WATCHDOG_USEC": "200000", "STALLMON_SYSTEMD_HANG_AFTER_MS": "1000",
            ]), stdoutPath: root + "/out", stderrPath: root + "/err")
        defer { child.kill() }
        func events() -> [StallEvent] {
            let log = (try? String(contentsOfFile: reports + "/events.jsonl", encoding: .utf8)) ?? ""
            return log.split(separator: "\n").compactMap {
                try? JSONDecoder().decode(StallEvent.self, from: Data($0.utf8))
            }
        }
        // Until the interim is logged (its report is on disk by then), reading the pings: the socket's queue is short.
        let end = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < end, !events().contains(where: { $0.event == "stall.interim" }) {
            _ = notify.receive(for: .milliseconds(100))
        }
        let errors = (try? String(contentsOfFile: root + "/err", encoding: .utf8)) ?? ""
        let logged = events()
        try #require(logged.contains { $0.event == "stall.interim" }, "\(logged.map(\.event)) \(errors)")
        #expect(logged.filter { $0.event == "stall.hang" }.count == 1, "\(logged.map(\.event))")
        #expect(!logged.contains { $0.event == "process.frozen" }, "nobody stopped the process: \(logged.map(\.event))")
        let written = readReports(reports)
        let report = try #require(written.first)
        #expect(written.count == 1, "the interim replaced the hang's report")
        #expect(report.ongoing && report.durationMs >= 2000, "the interim: \(report.durationMs) ms")
        #expect(report.hang == StallReport.Hang(action: "watchdog", afterMs: 1000), "the interim kept the hang")
        #expect(report.frozenMs == nil, "nothing set aside as frozen: \(report.frozenMs ?? 0) ms")
    }
}
