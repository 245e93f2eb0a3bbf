// A Hummingbird 2 service wired as the README says (NIOStallMonitor for the event loops, ConcurrencyStallMonitor
// for the async code), whose async route handlers block their worker in named functions.
//
//   hb-stall-service REPORT_DIR PORT_FILE [monitor | nio-takeover | plain | service-group | service-group-last]
//
// service-group: run in a ServiceGroup as the README says (StallMonitorService watching the application, SIGTERM
// and SIGINT shut it down gracefully); service-group-last: the wiring the README once had (the monitor listed after
// the application, so stopped first). GET /sleep?ms=N blocks a worker for N ms; a SIGTERM meanwhile drains it.
//
// Writes the port it listens on (127.0.0.1) to PORT_FILE. GET /cpu, /sleep, /lock and /users/{id}/invoice stall;
// /fast does not; StallLabelMiddleware names each request's stalls after its route;
// /measurements lists what each stalling handler measured itself: `measured NAME MS TID` lines. With
// STALL_SERVICE_TRACING=1 the service traces its requests (W3CInMemoryTracer, Hummingbird's TracingMiddleware before
// StallLabelMiddleware, as the docs say) and GET /spans lists the spans it finished. In nio-takeover
// mode, NIO's executor take-over is installed first and the monitor's error goes to stderr (exit 3). In plain mode
// there is no monitor at all (the benchmark's baseline).
import Foundation
import Hummingbird
import Logging
import NIOCore
import NIOPosix
import Instrumentation
import ServiceLifecycle
import Stallmon
import StallmonNIO
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

let measurements = Mutex<[String]>([])

@Sendable func monotonicNanoseconds() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
}

/// Runs `body`, recording how long it took on this thread (never printed inside the handler: that would add time).
func measured<T>(_ name: String, _ body: () -> T) -> T {
    let start = monotonicNanoseconds()
    let result = body()
    let elapsed = Double(monotonicNanoseconds() - start) / 1e6
    let tid = currentThreadID()
    measurements.withLock { $0.append("measured \(name) \(elapsed) \(tid)") }
    return result
}

/// The kernel thread id (Swift's Glibc module has neither gettid nor syscall): /proc/thread-self is PID/task/TID.
func currentThreadID() -> Int32 {
    var buffer = [CChar](repeating: 0, count: 64)
    let count = readlink("/proc/thread-self", &buffer, buffer.count - 1)
    guard count > 0 else { return 0 }
    let text = String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    return Int32(text.split(separator: "/").last ?? "") ?? 0
}

/// A mutex another thread, `ledger-writer`, holds for a while.
final class Ledger: @unchecked Sendable {
    let mutex: UnsafeMutablePointer<pthread_mutex_t> = {
        let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        return mutex
    }()

    func holdOnAnotherThread(milliseconds: Int) {
        let held = DispatchSemaphore(value: 0)
        let thread = Thread {
            Thread.current.name = "ledger-writer"
            pthread_mutex_lock(self.mutex)
            held.signal()
            Handlers.pause(milliseconds: milliseconds)
            pthread_mutex_unlock(self.mutex)
        }
        thread.start()
        held.wait()
    }
}

enum Handlers {
    static let ledger = Ledger()

    /// CPU-bound work in a handler: a big report rendered on the request's task.
    @inline(never)
    static func renderInvoice(milliseconds: Int) -> String {
        let end = monotonicNanoseconds() + UInt64(milliseconds) * 1_000_000
        var checksum: UInt64 = 1
        while monotonicNanoseconds() < end {
            for value in 0..<500 { checksum = checksum &* 6364136223846793005 &+ UInt64(value) }
        }
        return "invoice \(checksum)"
    }

    /// A blocking call in a handler (a synchronous file or database read).
    @inline(never)
    static func readLegacyFile(milliseconds: Int) -> String {
        var request = timespec(tv_sec: milliseconds / 1000, tv_nsec: (milliseconds % 1000) * 1_000_000)
        var remaining = timespec()
        while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
        return "legacy"
    }

    /// A lock another thread holds, taken in a handler.
    @inline(never)
    static func updateLedger() -> String {
        pthread_mutex_lock(ledger.mutex)
        pthread_mutex_unlock(ledger.mutex)
        return "ledger"
    }

    /// nanosleep, resumed after the sampling signal's EINTR.
    static func pause(milliseconds: Int) {
        var request = timespec(tv_sec: milliseconds / 1000, tv_nsec: (milliseconds % 1000) * 1_000_000)
        var remaining = timespec()
        while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
    }
}

/// The service's own layers under a route: each awaits for real (a database round trip, here a short sleep) before
/// it calls down, and the innermost renders on the request's task. The report's await chain must reach the route.
enum AccountService {
    @inline(never)
    static func statement(for id: String) async -> String {
        try? await Task.sleep(for: .milliseconds(2))
        return await StatementStore.render(id) + " for \(id)"
    }
}

enum StatementStore {
    @inline(never)
    static func render(_ id: String) async -> String {
        try? await Task.sleep(for: .milliseconds(2))
        return measured("statement") { Handlers.renderInvoice(milliseconds: 200) }
    }
}

@main
struct Service {
    static func main() async throws {
        let arguments = CommandLine.arguments
        guard arguments.count >= 3 else {
            FileHandle.standardError.write(Data("usage: hb-stall-service REPORT_DIR PORT_FILE [monitor|nio-takeover]\n".utf8))
            exit(64)
        }
        let reportDirectory = arguments[1]
        let portFile = arguments[2]
        if arguments.count > 3 && arguments[3] == "nio-takeover" {
            guard NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor() else {
                FileHandle.standardError.write(Data("NIO's take-over did not install\n".utf8))
                exit(4)
            }
        }
        var configuration = StallMonitorConfiguration(detection: .init(threshold: .milliseconds(100)),
                                                      reports: .init(directory: reportDirectory))
        configuration.detection.sampleInterval = .milliseconds(10)
        let mode = arguments.count > 3 ? arguments[3] : "monitor"
        let plain = mode == "plain"
        let inServiceGroup = mode.hasPrefix("service-group")
        var monitors: (ConcurrencyStallMonitor, NIOStallMonitor)?
        if !plain {
            do {
                monitors = (try ConcurrencyStallMonitor(configuration: configuration),
                            try NIOStallMonitor(group: MultiThreadedEventLoopGroup.singleton, configuration: configuration))
            } catch {
                FileHandle.standardError.write(Data("\(error)\n".utf8))
                exit(3)
            }
            if !inServiceGroup {
                monitors?.0.start()
                monitors?.1.start()
            }
        }

        let tracer = ProcessInfo.processInfo.environment["STALL_SERVICE_TRACING"] == "1" ? W3CInMemoryTracer() : nil
        if let tracer { InstrumentationSystem.bootstrap(tracer) }
        let router = Router()
        if tracer != nil { router.add(middleware: TracingMiddleware()) }
        router.add(middleware: StallLabelMiddleware())
        router.get("cpu") { _, _ -> String in measured("cpu") { Handlers.renderInvoice(milliseconds: 300) } }
        router.get("sleep") { request, _ -> String in
            let milliseconds = request.uri.queryParameters.get("ms", as: Int.self) ?? 250
            return measured("sleep") { Handlers.readLegacyFile(milliseconds: milliseconds) }
        }
        router.get("lock") { _, _ -> String in
            Handlers.ledger.holdOnAnotherThread(milliseconds: 300)
            return measured("lock") { Handlers.updateLedger() }
        }
        router.get("users/{id}/invoice") { _, context -> String in
            let id = try context.parameters.require("id")
            return measured("invoice") { Handlers.renderInvoice(milliseconds: 200) + " for \(id)" }
        }
        router.get("accounts/{id}/statement") { _, context -> String in
            await AccountService.statement(for: try context.parameters.require("id"))
        }
        router.get("fast") { _, _ -> String in "fast" }
        router.get("measurements") { _, _ -> String in measurements.withLock { $0.joined(separator: "\n") } }
        router.get("spans") { _, _ -> String in tracer?.finishedSpanLines ?? "" }
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
                              onServerRunning: { channel in
                                  let port = channel.localAddress?.port ?? 0
                                  try? "\(port)\n".write(toFile: portFile, atomically: true, encoding: .utf8)
                              })
        if inServiceGroup, let (concurrency, nio) = monitors {
            let logger = Logger(label: "hb-stall-service")
            let services: [any ServiceLifecycle.Service]
            if mode == "service-group-last" {
                services = [app, StallMonitorService([concurrency, nio])]
            } else {
                // As the README says.
                services = [StallMonitorService([concurrency, nio], watching: [app])]
            }
            let group = ServiceGroup(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
            try await group.run()
            FileHandle.standardError.write(Data("drained\n".utf8))
            return
        }
        try await app.runService()
        _ = monitors
    }
}
