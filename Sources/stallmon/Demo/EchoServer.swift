import Foundation
import StallmonLoop
import Synchronization

/// A TCP echo server on 127.0.0.1 driven by the loop's fd sources, and a client on its own thread that sends a
/// ping every 50 ms and measures the round trip: the client's worst round trip is what a stall costs a caller.
final class EchoServer: Sendable {
    let port: UInt16
    private let listener: Int32
    private let loop: Looper
    private let connections = Mutex<[Int32: LooperFDSource]>([:])

    init(loop: Looper) throws {
        self.loop = loop
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw DemoError("socket: \(String(cString: strerror(errno)))") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 16) == 0 else {
            close(fd)
            throw DemoError("bind/listen on 127.0.0.1: \(String(cString: strerror(errno)))")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        listener = fd
        port = UInt16(bigEndian: address.sin_port)
        loop.addReader(fd, label: "echo.accept") { [self] in acceptConnections() }
    }

    private func acceptConnections() {
        while true {
            let connection = accept(listener, nil, nil)
            guard connection >= 0 else { return }
            _ = fcntl(connection, F_SETFL, fcntl(connection, F_GETFL) | O_NONBLOCK)
            _ = fcntl(connection, F_SETFD, FD_CLOEXEC)
            let source = loop.addReader(connection, label: "echo.read") { [self] in echo(connection) }
            connections.withLock { $0[connection] = source }
        }
    }

    private func echo(_ connection: Int32) {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let got = read(connection, &buffer, buffer.count)
            if got > 0 {
                _ = buffer.withUnsafeBytes { write(connection, $0.baseAddress, got) }
                continue
            }
            if got < 0 && (errno == EAGAIN || errno == EINTR) { return }
            connections.withLock { $0.removeValue(forKey: connection) }?.cancel()  // EOF or error
            close(connection)
            return
        }
    }

    func shutdown() {
        for (fd, source) in connections.withLock({ $0 }) {
            source.cancel()
            close(fd)
        }
        close(listener)
    }
}

/// The echo client: blocking socket on its own thread.
final class EchoClient: Sendable {
    private let stopping = Atomic<Bool>(false)
    let roundTrips = Atomic<Int>(0)
    let worstRoundTripMicroseconds = Atomic<Int>(0)
    private let finished = DispatchSemaphore(value: 0)

    func start(port: UInt16) {
        Thread.detachNewThread { [self] in
            defer { finished.signal() }
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard fd >= 0 else { return }
            defer { close(fd) }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            address.sin_port = port.bigEndian
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            guard connected == 0 else { return }
            var sequence = 0
            var buffer = [UInt8](repeating: 0, count: 64)
            while !stopping.load(ordering: .relaxed) {
                sequence += 1
                let message = Array("ping \(sequence)\n".utf8)
                let sent = MonotonicInstant.now()
                guard message.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) == message.count else { return }
                var received = 0
                while received < message.count {
                    let got = read(fd, &buffer, buffer.count)
                    if got <= 0 { return }
                    received += got
                }
                let micros = Int(MonotonicInstant.now().nanoseconds(since: sent) / 1000)
                roundTrips.wrappingAdd(1, ordering: .relaxed)
                var worst = worstRoundTripMicroseconds.load(ordering: .relaxed)
                while micros > worst {
                    let (exchanged, original) = worstRoundTripMicroseconds.compareExchange(
                        expected: worst, desired: micros, ordering: .relaxed)
                    if exchanged { break }
                    worst = original
                }
                usleep(50_000)
            }
        }
    }

    func stop() {
        stopping.store(true, ordering: .relaxed)
        _ = finished.wait(timeout: .now() + 2)
    }
}

struct DemoError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
