import CStallmonLoopShims
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import StallmonTestSupport
import Synchronization

/// A real NIOHTTP1 server on 127.0.0.1 whose handler stalls its event loop in `channelRead` on request:
/// `/spin?ms=N` burns CPU, `/sleep?ms=N` sleeps, `/lock?ms=N` waits for `heldLock` (held by another thread), `/`
/// answers at once. The handler records when it stalled, measured by itself, per request path.
final class StallingHTTPServer: Sendable {
    let channel: any Channel
    let measured = NIOLockedValueBox<[(path: String, stall: MeasuredStall, thread: String)]>([])
    let heldLock = NIOLockedValueBox(0)
    /// Set by `/lock`'s handler just before it takes `heldLock`: a holder can time its hold from there.
    let lockRequested = NIOLockedValueBox(false)

    var port: Int { channel.localAddress!.port! }

    init(group: any EventLoopGroup) throws {
        let measured = measured
        let heldLock = heldLock
        let lockRequested = lockRequested
        channel = try ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.pipeline.configureHTTPServerPipeline().flatMap {
                    channel.pipeline.addHandler(StallingHandler(measured: measured, heldLock: heldLock,
                                                                  lockRequested: lockRequested))
                }
            }
            .bind(host: "127.0.0.1", port: 0).wait()
    }

    func close() throws {
        try channel.close().wait()
    }
}

final class StallingHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let measured: NIOLockedValueBox<[(path: String, stall: MeasuredStall, thread: String)]>
    let heldLock: NIOLockedValueBox<Int>
    let lockRequested: NIOLockedValueBox<Bool>

    init(measured: NIOLockedValueBox<[(path: String, stall: MeasuredStall, thread: String)]>, heldLock: NIOLockedValueBox<Int>,
         lockRequested: NIOLockedValueBox<Bool>) {
        self.measured = measured
        self.heldLock = heldLock
        self.lockRequested = lockRequested
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .head(let head) = unwrapInboundIn(data) else { return }
        let parts = head.uri.split(separator: "?")
        let path = String(parts.first ?? "/")
        let milliseconds = parts.count > 1 ? Int(parts[1].split(separator: "=").last ?? "0") ?? 0 : 0
        let stall = MeasuredStall.timing {
            switch path {
            case "/spin": _ = burnCPUInChannelRead(milliseconds: milliseconds)
            case "/sleep": sleepInChannelRead(milliseconds: milliseconds)
            case "/lock": waitForLockInChannelRead()
            default: break
            }
        }
        if path != "/" { measured.withLockedValue { $0.append((head.uri, stall, threadName())) } }
        var headers = HTTPHeaders()
        headers.add(name: "content-length", value: "2")
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: .ok, headers: headers))),
                      promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: "ok")))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }

    @inline(never)
    func burnCPUInChannelRead(milliseconds: Int) -> UInt64 {
        let end = cstallmon_monotonic_ns() + UInt64(milliseconds) * 1_000_000
        var accumulator: UInt64 = 1
        while cstallmon_monotonic_ns() < end {
            for value in 0..<1000 { accumulator = accumulator &* 6364136223846793005 &+ UInt64(value) }
        }
        return accumulator
    }

    @inline(never)
    func sleepInChannelRead(milliseconds: Int) {
        var request = timespec(tv_sec: milliseconds / 1000, tv_nsec: (milliseconds % 1000) * 1_000_000)
        var remaining = timespec()
        while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
    }

    @inline(never)
    func waitForLockInChannelRead() {
        lockRequested.withLockedValue { $0 = true }
        heldLock.withLockedValue { $0 += 1 }
    }
}

/// The calling thread's name (NIO names its loop threads `NIO-ELT-<group>-#<loop>`).
func threadName() -> String {
    let name = (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? ""
    return name.trimmingCharacters(in: .whitespacesAndNewlines)
}

/// HTTP/1.1 GETs of `paths`, one after another on one keep-alive TCP connection to 127.0.0.1:`port`; returns each
/// response's status line ("" on failure). A first request on the connection is `/`, so the stalling requests find
/// the channel set up and their tick holds only the read, the handler and the response write.
func httpGet(port: Int, path: String) -> String {
    httpGets(port: port, paths: ["/", path]).last ?? ""
}

func httpGets(port: Int, paths: [String]) -> [String] {
    guard let fd = connectToLoopback(port: port) else { return [] }
    defer { close(fd) }
    var statuses: [String] = []
    for path in paths {
        let request = Array("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
        guard write(fd, request, request.count) == request.count else { break }
        // Every response is a head with content-length 2 and the body "ok".
        var response: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !String(decoding: response, as: UTF8.self).hasSuffix("\r\n\r\nok") {
            let count = read(fd, &buffer, buffer.count)
            if count <= 0 { return statuses }
            response += buffer[0..<count]
        }
        statuses.append(String(decoding: response, as: UTF8.self).split(separator: "\r\n").first.map(String.init) ?? "")
    }
    return statuses
}
