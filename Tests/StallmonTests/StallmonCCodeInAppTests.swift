@testable import Stallmon
@testable import StallmonReport
import Testing

/// The service's executable, into which SwiftPM links stallmon's C targets statically.
private let serviceExecutable = "/srv/app/bin/app"

/// stallmon's own C code is never the service's (issue 32, item 5): StallmonNIO's interposed `epoll_wait` topped the
/// reports of a route blocking in an `epoll_wait` of its own, and the executor's `run_job`, `run_timed` and
/// `run_timed_job` were in-app in every async report, so they took part in signatures. Decided by the frame's DWARF
/// source file (a file under `Sources/<stallmon's C target>/`, wherever the package is) and by name.
struct StallmonCCodeInAppTests {
    func inApp(_ symbol: String?, file: String? = nil, rules: InAppRules = InAppRules()) -> Bool {
        Symbolicator.isInApp(module: serviceExecutable, symbol: symbol, file: file, executable: serviceExecutable,
                             rules: rules)
    }

    /// A frame classified as the symbolicator classifies it; index i sits at its own address.
    func frame(_ index: Int, _ symbol: String, file: String?, module given: String? = nil) -> StallReport.Frame {
        let module = given ?? serviceExecutable
        let address = hex(0x1000 + UInt(index) * 16)
        return StallReport.Frame(address: address, image: 0, module: module, offset: address, symbol: symbol,
                                 symbolOffset: 4, file: file, line: file == nil ? nil : 10 + index,
                                 inApp: Symbolicator.isInApp(module: module, symbol: symbol, file: file,
                                                             executable: serviceExecutable))
    }

    @Test("stallmon's C files are not in-app wherever the package is checked out, and no rule re-includes them")
    func stallmonsCFilesAreNotInApp() {
        // This repository, a path dependency (under any directory name), a SwiftPM checkout.
        for root in ["/work/main", "/home/me/src/stallmon", "/build/vendor/monitor",
                     "/srv/app/.build/checkouts/stallmon"] {
            #expect(!inApp("epoll_wait", file: root + "/Sources/CStallmonNIOHook/hook.c"), "\(root)")
            #expect(!inApp("run_timed_job", file: root + "/Sources/CStallmonConcurrency/executor.c"), "\(root)")
            #expect(!inApp("run_timed", file: root + "/Sources/CStallmonConcurrency/executor.c"), "inlined, \(root)")
            #expect(!inApp("run_job", file: root + "/Sources/CStallmonConcurrency/executor.c"), "inlined, \(root)")
            #expect(!inApp("monotonic_ns", file: root + "/Sources/CStallmonLoopShims/shims.c"), "\(root)")
            let header = root + "/Sources/CStallmonConcurrency/include/CStallmonConcurrency.h"
            #expect(!inApp("job_clock_now", file: header), "a header of a C target, \(root)")
        }
        // A build that mapped the package root away (-fdebug-prefix-map): relative DWARF paths.
        #expect(!inApp("epoll_wait", file: "Sources/CStallmonNIOHook/hook.c"))
        #expect(!inApp("run_timed_job", file: "./Sources/CStallmonConcurrency/executor.c"))
        #expect(!inApp(nil, file: "/work/main/Sources/CStallmonNIOHook/hook.c"), "a file without a symbol")
        #expect(!inApp("run_timed_job", file: "/work/main/Sources/CStallmonConcurrency/executor.c",
                       rules: InAppRules(include: ["CStallmonConcurrency"])), "in_app_include does not re-include it")
        #expect(Symbolicator.isStallmonCCode(symbol: "epoll_wait", file: "/x/Sources/CStallmonNIOHook/hook.c"))
    }

    @Test("without DWARF, stallmon's C functions are known by name: the cstallmon_ prefix and the one without it")
    func stallmonsCFunctionsAreKnownByName() {
        // Statically linked into the service's executable (as SwiftPM links them), no source file: by name.
        #expect(!inApp("epoll_wait"), "StallmonNIO's interposer")
        #expect(!inApp("cstallmon_run_timed_job"), "the global executor's static job runner")
        #expect(!inApp("cstallmon_run_timed_main_job"))
        #expect(!inApp("cstallmon_enqueue_global"))
        #expect(!inApp("epoll_wait.cold"), "a part the compiler split off")
        #expect(!inApp("cstallmon_epoll_wait"))
        #expect(!inApp("cstallmon_wait_hook_install", file: "/elsewhere/hook.c"), "the prefix decides, any file")
        #expect(inApp("epoll_waits"), "exact names only")
        #expect(inApp("run_timed_job"), "a service's own function of a name stallmon's C code no longer uses")
        #expect(inApp("run_job"), "always inlined in stallmon: without DWARF the name cannot be stallmon's")
    }

    @Test("a service's own C code stays in-app: its own hook.c, its own targets, even its own epoll_wait interposer")
    func aServicesOwnCCodeStaysInApp() {
        #expect(inApp("hook_request", file: "/src/app/Sources/AppHooks/hook.c"))
        #expect(inApp("run_job", file: "/src/app/Sources/CWorker/executor.c"))
        #expect(inApp("epoll_wait", file: "/src/app/Sources/CPoller/hook.c"), "DWARF names the service's file")
        #expect(inApp("drain", file: "/src/app/Sources/CStallmonExtras/drain.c"), "only stallmon's exact targets")
        #expect(inApp("drain", file: "/src/app/Sources/App/CStallmonNIOHook/drain.c"), "not a target directory")
        #expect(inApp("drain", file: "/src/app/CStallmonNIOHook/drain.c"))
        #expect(!Symbolicator.isStallmonCCode(symbol: "hook_request", file: "/src/app/Sources/AppHooks/hook.c"))
        #expect(!Symbolicator.isStallmonCCode(symbol: nil, file: nil))
    }

    /// A route blocking in an `epoll_wait` of its own on a NIO loop: the hook's frame sits between libc's wait and
    /// the route. The route tops the report and the hook is not in its signature.
    @Test func theHooksEpollWaitNeitherTopsAReportNorTakesPartInItsSignature() {
        let hook = "/home/me/src/stallmon/Sources/CStallmonNIOHook/hook.c"
        let routes = "/src/app/Sources/App/Routes.swift"
        let frames = [
            frame(0, "epoll_pwait", file: nil, module: "/usr/lib/x86_64-linux-gnu/libc.so.6"),
            frame(1, "epoll_wait", file: hook),
            frame(2, "App.Routes.pollUpstream() -> ()", file: routes),
            frame(3, "App.Routes.handle() -> ()", file: routes),
            frame(4, "NIOPosix.SelectableEventLoop.run() throws -> ()", file: nil),
        ]
        #expect(frames.map(\.inApp) == [false, false, true, true, false])
        let samples = Array(repeating: StallReport.Sample(offsetMs: 0, status: .ok, frames: [0, 1, 2, 3, 4],
                                                          truncated: false, label: nil), count: 3)
        let analysis = StallAggregation.analyze(frames: frames, samples: samples)
        #expect(analysis.topFrame?.symbol == "App.Routes.pollUpstream() -> ()",
                "\(String(describing: analysis.topFrame))")
        #expect(analysis.topFrame?.file == routes)
        #expect(analysis.signature
                == StallAggregation.combine(["App.Routes.pollUpstream() -> ()", "App.Routes.handle() -> ()"]))
    }

    /// An async job: the executor's runner (a physical frame, with `run_timed` and `run_job` inlined in it) under the
    /// task's code. None of the three is in-app; the signature is the task's functions alone.
    @Test func theExecutorsJobRunnersAreNotInAppNorInTheSignature() {
        let executor = "/work/main/Sources/CStallmonConcurrency/executor.c"
        let jobs = "/src/app/Sources/App/Jobs.swift"
        let runner = frame(3, "run_timed_job", file: executor)
        let expanded = StallReport.Frame.expanding(
            runner, inlined: [InlinedCall(symbol: "run_job", file: executor, line: 399),
                              InlinedCall(symbol: "run_timed", file: executor, line: 524)],
            executable: serviceExecutable)
        #expect(expanded.map(\.symbol) == ["run_job", "run_timed", "run_timed_job"])
        #expect(expanded.allSatisfy { !$0.inApp }, "\(expanded.filter(\.inApp).map { $0.symbol ?? "-" })")
        let frames = [
            frame(0, "App.Jobs.spin() -> ()", file: jobs),
            frame(1, "App.Jobs.run() async -> ()", file: jobs),
            frame(2, "swift::runJobInEstablishedExecutorContext(swift::Job*)", file: nil,
                  module: "/usr/lib/swift/linux/libswift_Concurrency.so"),
        ] + expanded + [frame(6, "_dispatch_worker_thread", file: nil, module: "/usr/lib/swift/linux/libdispatch.so")]
        #expect(frames.map(\.inApp) == [true, true, false, false, false, false, false])
        let stack = Array(frames.indices)
        let samples = Array(repeating: StallReport.Sample(offsetMs: 0, status: .ok, frames: stack, truncated: false,
                                                          label: nil), count: 4)
        let analysis = StallAggregation.analyze(frames: frames, samples: samples)
        #expect(analysis.topFrame?.symbol == "App.Jobs.spin() -> ()")
        #expect(analysis.signature == StallAggregation.combine(["App.Jobs.spin() -> ()", "App.Jobs.run() async -> ()"]))
    }
}
