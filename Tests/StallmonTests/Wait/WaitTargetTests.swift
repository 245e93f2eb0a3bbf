import CStallmonLoopShims
import Foundation
@testable import Stallmon
import StallmonLoop
@testable import StallmonReport
import StallmonTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// What a blocked stall waited on: parsing /proc's views (pure), then real blocked reads on a monitored loop.
struct WaitTargetParsingTests {
    @Test func theSyscallFileGivesTheCallAndItsDescriptor() throws {
        #if arch(x86_64)
        let read = try #require(SystemCall.parse("0 0x7 0x7ffd5c2a 0x1000 0x0 0x0 0x0 0x7ffd5c10 0x7f12ab34\n"))
        #expect(read.name == "read")
        #expect(read.fileDescriptor == 7)
        let futex = try #require(SystemCall.parse("202 0x55d0c0 0x80 0x2 0x0 0x0 0x0 0x7ffd 0x7f12\n"))
        #expect(futex.name == "futex")
        #expect(futex.fileDescriptor == nil)
        #endif
        #expect(SystemCall.parse("running\n") == nil)
        #expect(SystemCall.parse("-1 0x7ffd5c10 0x7f12ab34\n") == nil)
        #expect(SystemCall.parse("garbage") == nil)
        #expect(SystemCall(number: 99_999, arguments: []).name == "syscall 99999")
    }

    @Test func linksName() {
        #expect(DescriptorResolver.describe(link: "pipe:[4711]") == ("pipe", "pipe"))
        #expect(DescriptorResolver.describe(link: "/var/lib/app/ledger.db") == ("file", "/var/lib/app/ledger.db"))
        #expect(DescriptorResolver.describe(link: "anon_inode:[eventfd]") == ("eventfd", "eventfd"))
        #expect(DescriptorResolver.describe(link: "socket:[1]").kind == "socket")
    }

    @Test func socketEndsComeFromTheDescriptorItself() throws {
        var pair: [Int32] = [0, 0]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0)
        defer { close(pair[0]); close(pair[1]) }
        #expect(DescriptorResolver.socketEnds(pair[0]) == "Unix socket (unnamed)")
        // An IPv6 UDP socket connected to [::1]:9 (nothing is sent).
        let udp = socket(AF_INET6, Int32(SOCK_DGRAM.rawValue), 0)
        try #require(udp >= 0)
        defer { close(udp) }
        var address = sockaddr_in6()
        address.sin6_family = sa_family_t(AF_INET6)
        address.sin6_port = UInt16(9).bigEndian
        address.sin6_addr.__in6_u.__u6_addr8.15 = 1
        let connected = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(udp, $0, socklen_t(MemoryLayout<sockaddr_in6>.size))
            }
        }
        if connected == 0 {  // a host without IPv6 loopback cannot, and that is not what this checks
            let ends = try #require(DescriptorResolver.socketEnds(udp))
            #expect(ends.hasPrefix("UDP [::1]:") && ends.hasSuffix(" → [::1]:9"), "\(ends)")
        }
        #expect(DescriptorResolver.socketEnds(-1) == nil)
    }
}

@Suite(.serialized)
struct WaitTargetMonitorTests {
    private func monitored(_ name: String, _ directory: String) throws -> (Looper, LooperStallMonitor) {
        let loop = try Looper(name: name)
        let monitor = try LooperStallMonitor(loop: loop, configuration: .init(
            detection: .init(threshold: .milliseconds(50)), reports: .init(directory: directory)))
        monitor.start()
        return (loop, monitor)
    }

    @Test func aBlockingReadOfASilentTCPPeerNamesBothAddresses() throws {
        let directory = makeTemporaryDirectory()
        // A listener on 127.0.0.1 that accepts (the kernel does, into its backlog) and never answers.
        let (listener, port) = try #require(listenOnLoopback(backlog: 4))
        defer { close(listener) }
        let serverPort = UInt16(port)
        let client = try #require(connectToLoopback(port: port))
        defer { close(client) }
        var local = sockaddr_in()
        var localLength = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(client, $0, &localLength) }
        }
        let clientPort = UInt16(bigEndian: local.sin_port)
        var timeout = timeval(tv_sec: 0, tv_usec: 250_000)  // the read gives up after 250 ms
        setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))

        let (loop, monitor) = try monitored("tcp-wait", directory)
        loop.schedule(after: .milliseconds(20), label: "query") {
            var byte: UInt8 = 0
            _ = read(client, &byte, 1)
        }
        loop.run(for: .milliseconds(600))
        monitor.stop()
        let report = try #require(readReports(directory).first)
        let wait = try #require(report.waitingOn?.first, "\(String(describing: report.waitingOn))")
        #expect(wait.kind == "socket")
        #expect(wait.syscall == "read")
        #expect(wait.target == "TCP 127.0.0.1:\(clientPort) → 127.0.0.1:\(serverPort)")
        #expect(wait.samples >= report.samples.count - 2, "\(wait.samples) of \(report.samples.count)")
        #expect(monitor.statistics.stallsDetected == 1)
    }

    @Test func aBlockingPipeReadAndASleepAreNamed() throws {
        let directory = makeTemporaryDirectory()
        var ends: [Int32] = [0, 0]
        try #require(pipe(&ends) == 0)
        defer { close(ends[0]); close(ends[1]) }
        let writeEnd = ends[1]
        let readEnd = ends[0]
        let (loop, monitor) = try monitored("pipe-wait", directory)
        loop.schedule(after: .milliseconds(20), label: "pipe") {
            let writer = Thread { usleep(200_000); var byte: UInt8 = 1; _ = write(writeEnd, &byte, 1) }
            writer.start()
            var byte: UInt8 = 0
            _ = read(readEnd, &byte, 1)
        }
        loop.schedule(after: .milliseconds(400), label: "nap") { usleep(200_000) }
        loop.run(for: .milliseconds(800))
        monitor.stop()
        let reports = readReports(directory)
        let pipeReport = try #require(reports.first { $0.label == "pipe" })
        #expect(pipeReport.waitingOn?.first?.kind == "pipe", "\(String(describing: pipeReport.waitingOn))")
        #expect(pipeReport.waitingOn?.first?.syscall == "read")
        let napReport = try #require(reports.first { $0.label == "nap" })
        #expect(napReport.waitingOn?.first?.kind == "sleep", "\(String(describing: napReport.waitingOn))")
        #expect(napReport.waitingOn?.first?.syscall == "clock_nanosleep")
    }

    /// A loop that syncs a file again and again (a journal commit per fsync on a disk file system) waits in fsync,
    /// uninterruptibly: the report names the call and the file.
    @Test func aLoopSyncingAFileNamesTheFile() throws {
        let directory = makeTemporaryDirectory()
        // On tmpfs or ramfs fsync returns at once, and there is nothing to wait for.
        let onDisk = !["tmpfs", "ramfs"].contains(fileSystemType(of: directory))
        let path = directory + "/journal.db"
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        try #require(fd >= 0)
        defer { close(fd) }
        let (loop, monitor) = try monitored("fsync-wait", directory)
        loop.schedule(after: .milliseconds(20), label: "commit") {
            let block = [UInt8](repeating: 7, count: 4096)
            let end = cstallmon_monotonic_ns() + 300_000_000
            repeat {
                _ = block.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                fsync(fd)
            } while cstallmon_monotonic_ns() < end
        }
        loop.run(for: .milliseconds(600))
        monitor.stop()
        let report = try #require(readReports(directory).first { $0.label == "commit" })
        let waits = report.waitingOn ?? []
        guard onDisk else { return }
        // A disk whose cache makes fsync return at once (seen under a loaded run: the thread slept 0 of its samples)
        // leaves nothing to wait for, as tmpfs does: the thread's own figures say whether it waited at all.
        let slept = report.samples.filter { $0.state == "D" || $0.state == "S" }.count
        guard slept * 2 >= report.samples.count else { return }
        let sync = try #require(waits.first { $0.syscall == "fsync" || $0.syscall == "fdatasync" }, "\(waits)")
        #expect(sync.kind == "file")
        #expect(sync.target == path, "\(String(describing: sync.target))")
    }
}

/// The type of the file system `path` is on (the longest mount point of /proc/self/mounts that contains it).
private func fileSystemType(of path: String) -> String {
    let mounts = (try? String(contentsOfFile: "/proc/self/mounts", encoding: .utf8)) ?? ""
    var best = (point: "", type: "")
    for line in mounts.split(separator: "\n") {
        let fields = line.split(separator: " ")
        guard fields.count >= 3 else { continue }
        let point = String(fields[1])
        let contains = path == point || path.hasPrefix(point == "/" ? "/" : point + "/")
        if contains && point.count > best.point.count { best = (point, String(fields[2])) }
    }
    return best.type
}
