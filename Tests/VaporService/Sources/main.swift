// A Vapor 4 service wired as the README says (NIOStallMonitor on the event loops Vapor runs on, ConcurrencyStallMonitor
// for the async code, StallLabelMiddleware on a route group), whose route handlers block in named functions.
//
//   vapor-stall-service REPORT_DIR PORT_FILE
//
// Writes the port it listens on (127.0.0.1) to PORT_FILE. Async routes, labelled: GET /cpu, /users/:id/invoice (CPU
// work in the handler's task), /fanout (a child task of `async let` and an unstructured `Task` the handler starts,
// each blocking: neither calls StallLabel itself). GET /sync-cpu is a synchronous route: it runs on the event loop.
// GET /fast does not stall. Runs until killed.
import Foundation
import NIOCore
import NIOPosix
import Stallmon
import StallmonNIO
import Vapor

@Sendable func monotonicNanoseconds() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
}

enum Handlers {
    /// CPU-bound work (a big document rendered on the request's task).
    @inline(never)
    static func renderInvoice(milliseconds: Int) -> String {
        let end = monotonicNanoseconds() + UInt64(milliseconds) * 1_000_000
        var checksum: UInt64 = 1
        while monotonicNanoseconds() < end {
            for value in 0..<500 { checksum = checksum &* 6364136223846793005 &+ UInt64(value) }
        }
        return "invoice \(checksum)"
    }

    /// A blocking read in a child task of the handler.
    @inline(never)
    static func readArchive(milliseconds: Int) -> String {
        var request = timespec(tv_sec: milliseconds / 1000, tv_nsec: (milliseconds % 1000) * 1_000_000)
        var remaining = timespec()
        while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
        return "archive"
    }

    /// CPU work in an unstructured task the handler starts.
    @inline(never)
    static func compressAttachment(milliseconds: Int) -> String {
        let end = monotonicNanoseconds() + UInt64(milliseconds) * 1_000_000
        var state: UInt64 = 7
        while monotonicNanoseconds() < end {
            for value in 0..<500 { state = (state ^ UInt64(value)) &* 0x100000001B3 }
        }
        return "attachment \(state)"
    }

    /// CPU work on the event loop (a synchronous route).
    @inline(never)
    static func renderOnTheLoop(milliseconds: Int) -> String {
        let end = monotonicNanoseconds() + UInt64(milliseconds) * 1_000_000
        var state: UInt64 = 3
        while monotonicNanoseconds() < end {
            for value in 0..<500 { state = state &* 2862933555777941757 &+ UInt64(value) }
        }
        return "page \(state)"
    }
}

let arguments = CommandLine.arguments
guard arguments.count >= 3 else {
    FileHandle.standardError.write(Data("usage: vapor-stall-service REPORT_DIR PORT_FILE\n".utf8))
    exit(64)
}
var configuration = StallMonitorConfiguration(detection: .init(threshold: .milliseconds(100)),
                                              reports: .init(directory: arguments[1]))
configuration.detection.sampleInterval = .milliseconds(10)
let monitors: (ConcurrencyStallMonitor, NIOStallMonitor)
do {
    monitors = (try ConcurrencyStallMonitor(configuration: configuration),
                try NIOStallMonitor(group: MultiThreadedEventLoopGroup.singleton, configuration: configuration))
} catch {
    FileHandle.standardError.write(Data("\(error)\n".utf8))
    exit(3)
}
monitors.0.start()
monitors.1.start()

let app = try await Application.make(Environment(name: "production", arguments: ["vapor-stall-service"]))
app.logger.logLevel = .warning
let labelled = app.grouped(StallLabelMiddleware())
labelled.get("cpu") { _ async -> String in Handlers.renderInvoice(milliseconds: 300) }
labelled.get("users", ":id", "invoice") { request async throws -> String in
    let id = try request.parameters.require("id")
    return Handlers.renderInvoice(milliseconds: 200) + " for \(id)"
}
labelled.get("fanout") { _ async -> String in
    async let archive = Handlers.readArchive(milliseconds: 300)
    let attachment = Task { Handlers.compressAttachment(milliseconds: 300) }
    return await archive + " " + attachment.value
}
labelled.get("sync-cpu") { _ -> String in Handlers.renderOnTheLoop(milliseconds: 300) }
labelled.get("fast") { _ async -> String in "fast" }

/// Starts Vapor's HTTP server on an ephemeral port of 127.0.0.1; returns the port.
func startServer(_ app: Application) async throws -> Int {
    let server: HTTPServer = app.http.server.shared
    try await server.start(address: .hostname("127.0.0.1", port: 0))
    return server.localAddress?.port ?? 0
}
let port = try await startServer(app)
try "\(port)\n".write(toFile: arguments[2], atomically: true, encoding: .utf8)
while true { try await Task.sleep(for: .seconds(3600)) }
