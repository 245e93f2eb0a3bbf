import ArgumentParser
import CStallmonCapture
import CStallmonLoopShims
import Foundation
import Logging
import Stallmon
import StallmonLoop
import StallmonReport
import Synchronization

/// `stallmon-bench`: the figures of README "Performance", measured side by side with the peers, printed as a table
/// and written as JSON. Run through `scripts/bench.sh` (release build). No figure is asserted anywhere.
@main
struct StallmonBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stallmon-bench",
        abstract: "Measure stallmon's overhead, capture cost, detection quality, scale and memory.",
        subcommands: [Run.self, StalledTarget.self, LoaderHazard.self, AsyncChild.self, PoolLoad.self],
        defaultSubcommand: Run.self)
}

/// A child process whose thread is stalled 30 frames deep, for eu-stack and gdb to attach to.
struct StalledTarget: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "stalled-target", shouldDisplay: false)

    func run() throws {
        let stop = StopFlag()
        let thread = Thread { _ = benchDescend(30, stop: stop) }
        thread.start()
        FileHandle.standardOutput.write(Data("ready \(getpid())\n".utf8))
        sleep(120)  // the parent kills us
    }
}

struct Run: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "run")

    @Option(help: "Where to write the figures as JSON.")
    var output = "bench-results.json"

    @Option(help: "Sections to run: loop, capture, detection, reports, upload, memory, nio, loops, async, pool-width.")
    var sections = "loop,capture,detection,reports,upload,memory,nio,loops,async,pool-width"

    @Option(help: "Report counts for `stallmon report` scale.")
    var reportScale = "1000,10000,100000"

    @Option(help: "The stallmon CLI to time (release build).")
    var stallmon = ".build/release/stallmon"

    @Option(help: "The scripted collector (Tests/StallmonTestSupport/receiver.py).")
    var receiver = "Tests/StallmonTestSupport/receiver.py"

    @Flag(help: "Fewer rounds and stalls (a quick look, not for the README).")
    var quick = false

    func run() throws {
        var logger = Logger(label: "bench")
        logger.logLevel = .critical
        let results = Results()
        let chosen = Set(sections.split(separator: ",").map(String.init))
        let scratch = FileManager.default.temporaryDirectory.path + "/stallmon-bench-\(getpid())"
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        defer {
            // STALLMON_BENCH_KEEP=1 keeps the scratch directory (template report, generated reports) to inspect.
            if ProcessInfo.processInfo.environment["STALLMON_BENCH_KEEP"] == nil {
                try? FileManager.default.removeItem(atPath: scratch)
            } else {
                print("kept \(scratch)")
            }
        }
        print("stallmon-bench: \(ProcessInfo.processInfo.activeProcessorCount) cores, "
            + "\(quick ? "quick" : "full") run, \(WallClockText.now())")

        // A real service is never single-threaded, and glibc takes a faster malloc path in a process that has only
        // one thread. Keep one idle thread for the whole run, so "monitor off" is not measured in a
        // single-threaded process that no service runs as (the monitor's own threads would otherwise be blamed).
        let idle = Thread { while true { sleep(3600) } }
        idle.start()
        if chosen.contains("loop") { try LoopOverhead(quick: quick, scratch: scratch, logger: logger).run(results) }
        if chosen.contains("capture") { try CaptureCost(quick: quick).run(results) }
        if chosen.contains("detection") {
            try DetectionQuality(quick: quick, scratch: scratch, logger: logger).run(results)
        }
        if chosen.contains("reports") {
            try ReportScale(quick: quick, scratch: scratch, stallmon: stallmon, logger: logger,
                            counts: reportScale.split(separator: ",").compactMap { Int($0) }).run(results)
        }
        if chosen.contains("upload") {
            try UploadThroughput(quick: quick, scratch: scratch, receiver: receiver, logger: logger).run(results)
        }
        if chosen.contains("memory") { try MemoryFootprint(scratch: scratch, logger: logger).run(results) }
        if chosen.contains("nio") { try NIOEventLoops(quick: quick, scratch: scratch, logger: logger).run(results) }
        if chosen.contains("loops") {
            try NIOEventLoops(quick: quick, scratch: scratch, logger: logger).manyLoops(results)
        }
        if chosen.contains("async") { try AsyncJobs(quick: quick, scratch: scratch).run(results) }
        if chosen.contains("pool-width") {
            let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
                ?? CommandLine.arguments[0]
            try PoolWidthUnderLimit(quick: quick, benchExecutable: executable).run(results)
        }

        struct Document: Encodable {
            var date: String
            var machine: String
            var quick: Bool
            var figures: [Figure]
        }
        let uname = (try? String(contentsOfFile: "/proc/sys/kernel/osrelease", encoding: .utf8))?
            .trimmingCharacters(in: .whitespacesAndNewlines) ?? "?"
        let document = Document(date: WallClockText.now(),
                                machine: "\(ProcessInfo.processInfo.activeProcessorCount) cores, Linux \(uname)",
                                quick: quick, figures: results.figures)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        // A figure that could not be measured (a peer missing, no successful sample) is NaN: written as "nan".
        encoder.nonConformingFloatEncodingStrategy = .convertToString(positiveInfinity: "inf", negativeInfinity: "-inf",
                                                                      nan: "nan")
        try encoder.encode(document).write(to: URL(fileURLWithPath: output))
        print("\nwrote \(output)")
    }
}

enum WallClockText {
    static func now() -> String {
        let formatter = ISO8601DateFormatter()
        return formatter.string(from: Date())
    }
}

// MARK: - 1. Loop overhead

struct LoopOverhead {
    let quick: Bool
    let scratch: String
    let logger: Logger

    /// `post` and `timer` do nothing but count: the monitor's cost against an empty pass. `work` posts blocks that
    /// each compute for about 2 µs, a small but real handler.
    enum Mode: String { case post, timer, work }

    func run(_ results: Results) throws {
        print("\n1. Loop overhead: the loop thread's CPU time per iteration, monitor off vs on (pairs alternate)")
        // One loop per workload, its hooks switched between short segments, and the loop thread's own CPU time
        // rather than wall time: on 2 shared cores a 1-second wall-clock rate moves by more than the 10 ns being
        // measured, and two loop instances differ by tens of ns by where their memory landed. The median of the
        // paired differences leaves out the segments a neighbour disturbed.
        let rounds = quick ? 11 : 61
        let segment: Duration = quick ? .milliseconds(60) : .milliseconds(150)
        for mode in [Mode.post, .timer, .work] {
            let bench = try Workload(mode)
            var off: [Measurement] = []
            var on: [Measurement] = []
            var added: [Double] = []
            var emptyAdded: [Double] = []
            var observerAdded: [Double] = []
            _ = try bench.measure(.none, segment: segment, scratch: scratch, logger: logger)  // warm-up
            for round in 0..<rounds {
                // Alternate which goes first, so drift in machine speed does not favour one side.
                let order: [Hook] = round % 2 == 0 ? [.none, .monitor] : [.monitor, .none]
                var pair: [Hook: Measurement] = [:]
                for hook in order {
                    pair[hook] = try bench.measure(hook, segment: segment, scratch: scratch, logger: logger)
                }
                let plain = pair[.none]!
                let monitored = pair[.monitor]!
                off.append(plain)
                on.append(monitored)
                added.append(monitored.cpuPerIteration - plain.cpuPerIteration)
                let empty = try bench.measure(.emptyObserver, segment: segment, scratch: scratch, logger: logger)
                emptyAdded.append(empty.cpuPerIteration - plain.cpuPerIteration)
                let viaObserver = try bench.measure(.probeThroughObserver, segment: segment, scratch: scratch,
                                                    logger: logger)
                observerAdded.append(viaObserver.cpuPerIteration - plain.cpuPerIteration)
            }
            let offCost = Stats.median(off.map(\.cpuPerIteration))
            results.add(Figure(section: "loop", name: "\(mode.rawValue) loop, CPU per iteration, monitor off → on",
                               value: offCost, unit: "ns",
                               note: String(format: "on: %.1f ns", Stats.median(on.map(\.cpuPerIteration)))))
            results.add(Figure(section: "loop", name: "\(mode.rawValue) loop, iterations/s off → on (wall)",
                               value: Stats.median(off.map(\.rate)), unit: "/s",
                               note: "on: \(Int(Stats.median(on.map(\.rate)))) /s"))
            results.add(Figure(section: "loop", name: "\(mode.rawValue) loop, time added per iteration",
                               value: Stats.median(added), unit: "ns", target: "≤ 10 ns"))
            results.add(Figure(section: "loop", name: "\(mode.rawValue) loop, slowdown",
                               value: Stats.median(added) / offCost * 100, unit: "%", target: "≤ 2 %"))
            results.add(Figure(section: "loop", name: "  before: the same probe called from an observer closure",
                               value: Stats.median(observerAdded), unit: "ns",
                               note: "the monitor's hook until 2026-11-23"))
            results.add(Figure(section: "loop", name: "  control: an empty observer of 5 activities costs",
                               value: Stats.median(emptyAdded), unit: "ns"))
        }
    }

    struct Measurement {
        /// Iterations per second of wall time.
        var rate: Double
        /// The loop thread's CPU time per iteration, in nanoseconds.
        var cpuPerIteration: Double
    }

    /// Hooks measured against the loop without any.
    enum Hook: Hashable {
        case none
        /// A started `LooperStallMonitor`.
        case monitor
        /// An observer that does nothing: what any observer costs.
        case emptyObserver
        /// The monitor's probe stores made from an observer closure, as the monitor hooked the loop before the probe
        /// was called directly (histogram included, so the difference is the call path alone).
        case probeThroughObserver
    }

    /// One loop and its workload, measured segment by segment with different hooks.
    final class Workload {
        let loop: Looper
        let count = Box(0)

        init(_ mode: Mode) throws {
            loop = try Looper(name: "bench")
            let label: LooperLabel = "bench.step"
            let loop = loop
            let count = count
            switch mode {
            case .post:
                @Sendable func step() {
                    count.value += 1
                    loop.perform(label: label, step)
                }
                loop.perform(label: label, step)
            case .timer:
                loop.schedule(every: .nanoseconds(1), label: label) { count.value += 1 }
            case .work:
                let sink = Box(UInt64(1))
                @Sendable func step() {
                    count.value += 1
                    sink.value = benchWork(sink.value)
                    loop.perform(label: label, step)
                }
                loop.perform(label: label, step)
            }
        }

        func measure(_ hook: Hook, segment: Duration, scratch: String, logger: Logger) throws -> Measurement {
            var monitor: LooperStallMonitor?
            var token: LooperObserverToken?
            let activities: LooperActivity = [.entry, .afterWaiting, .beforeTimers, .beforeWaiting, .exit]
            switch hook {
            case .none:
                break
            case .monitor:
                monitor = try LooperStallMonitor(loop: loop, configuration: .init(
                    detection: .init(threshold: .milliseconds(100)), reports: .init(directory: scratch + "/loop")),
                                                 logger: logger)
                monitor?.start()
            case .emptyObserver:
                token = loop.addObserver(for: activities) { _, _ in }
            case .probeThroughObserver:
                let probe = LoopProbe(thresholdNanoseconds: 100_000_000)
                token = loop.addObserver(for: activities, order: Int.min) { activity, now in
                    switch activity.rawValue {
                    case LooperActivity.beforeTimers.rawValue: probe.passBegins(at: now.nanoseconds)
                    case LooperActivity.beforeWaiting.rawValue: probe.loopIdles(at: now.nanoseconds)
                    case LooperActivity.afterWaiting.rawValue: probe.loopWoke(at: now.nanoseconds)
                    case LooperActivity.entry.rawValue: break
                    default: probe.loopIdles(at: now.nanoseconds)
                    }
                }
            }
            defer {
                monitor?.stop()
                if let token { loop.removeObserver(token) }
            }
            loop.run(for: .milliseconds(2))  // the hook is in place (bound, snapshot taken) before measuring
            let startCount = count.value
            let start = nowNanoseconds()
            let cpuStart = threadCPUNanoseconds()
            loop.run(for: segment)
            let cpu = threadCPUNanoseconds() - cpuStart
            let seconds = Double(nowNanoseconds() - start) / 1e9
            let iterations = Double(max(1, count.value - startCount))
            return Measurement(rate: iterations / seconds, cpuPerIteration: Double(cpu) / iterations)
        }
    }
}

/// CPU time of the calling thread (CLOCK_THREAD_CPUTIME_ID), in nanoseconds.
func threadCPUNanoseconds() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
    return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
}

// MARK: - 2. Capture cost

struct CaptureCost {
    let quick: Bool

    func run(_ results: Results) throws {
        print("\n2. Capture cost: a thread stalled 30 frames deep")
        let ourWall = try measureOwnCaptures(results)
        try measurePeers(results, ourWall: ourWall)
        try AwaitChainCost(quick: quick).run(results)
        try WaitResolutionCost(quick: quick).run(results)
        try measureLoaderHazard(results)
    }

    /// stallmon's captures of a thread 30 frames deep, with the image table and through the loader. Returns the
    /// watchdog's median wall time per capture (µs), which the peers are compared with.
    private func measureOwnCaptures(_ results: Results) throws -> Double {
        let signal = try SamplingSignal.default.resolve()
        var message = [CChar](repeating: 0, count: 256)
        guard cstallmon_install(signal, &message, message.count) == 0 else {
            throw ValidationError(String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        defer { cstallmon_release() }
        let stop = StopFlag()
        let slot = Atomic<Int32>(-1)
        let thread = Thread {
            let acquired = cstallmon_slot_acquire(cstallmon_gettid())
            _ = cstallmon_warm_up(acquired)
            slot.store(acquired, ordering: .releasing)
            _ = benchDescend(30, stop: stop)
        }
        thread.start()
        while slot.load(ordering: .acquiring) < 0 { usleep(1000) }
        usleep(20_000)  // let it reach the bottom
        let capturer = StackCapturerForBench(slot: slot.load(ordering: .acquiring))
        /// The successful captures of one run: pause, handler and watchdog wall time (µs), and frames.
        func captures(throughLoader: Bool) -> (pauses: [Double], handlers: [Double], walls: [Double], depths: [Int]) {
            cstallmon_set_unwind_through_loader(throughLoader ? 1 : 0)
            defer { cstallmon_set_unwind_through_loader(0) }
            var run: (pauses: [Double], handlers: [Double], walls: [Double], depths: [Int]) = ([], [], [], [])
            for _ in 0..<(quick ? 200 : 1000) {
                let sample = capturer.capture()
                guard sample.frames > 0 else { continue }
                run.pauses.append(sample.pause)
                run.handlers.append(sample.handler)
                run.walls.append(sample.wall)
                run.depths.append(sample.frames)
            }
            return run
        }
        let (pauses, handlers, walls, depths) = captures(throughLoader: false)
        // The same captures unwinding through the loader (dl_iterate_phdr), as before the image table.
        let (loaderPauses, loaderHandlers, _, _) = captures(throughLoader: true)
        stop.set()
        cstallmon_slot_release(slot.load(ordering: .relaxed))
        let ourWall = Stats.median(walls)
        results.add(Figure(section: "capture", name: "frames per capture (median)", value: Double(Stats.median(
            depths.map(Double.init))), unit: "frames"))
        results.add(Figure(section: "capture", name: "loop thread pause per sample, median", value: Stats.median(pauses),
                           unit: "us", target: "≤ 20 µs"))
        results.add(Figure(section: "capture", name: "loop thread pause per sample, p99",
                           value: Stats.percentile(pauses, 0.99), unit: "us"))
        // The pause starts when the signal is sent; the handler's own run shows how much of it is unwinding and
        // how much is delivery (scheduling).
        results.add(Figure(section: "capture", name: "  of which in the handler, median", value: Stats.median(handlers),
                           unit: "us"))
        results.add(Figure(section: "capture", name: "  of which in the handler, p99",
                           value: Stats.percentile(handlers, 0.99), unit: "us"))
        results.add(Figure(section: "capture", name: "  same captures through the loader (before): pause, median",
                           value: Stats.median(loaderPauses), unit: "us",
                           note: String(format: "p99 %.1f us; handler median %.1f us, p99 %.1f us",
                                        Stats.percentile(loaderPauses, 0.99), Stats.median(loaderHandlers),
                                        Stats.percentile(loaderHandlers, 0.99))))
        results.add(Figure(section: "capture", name: "watchdog wall time per capture, median", value: ourWall,
                           unit: "us"))
        results.add(Figure(section: "capture", name: "watchdog wall time per capture, p99",
                           value: Stats.percentile(walls, 0.99), unit: "us"))
        return ourWall
    }

    /// eu-stack and gdb taking one stack of a separate process stalled the same way.
    private func measurePeers(_ results: Results, ourWall: Double) throws {
        let target = Process()
        target.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
        target.arguments = ["stalled-target"]
        let pipe = Pipe()
        target.standardOutput = pipe
        try target.run()
        defer {
            kill(target.processIdentifier, SIGKILL)
            target.waitUntilExit()
        }
        _ = pipe.fileHandleForReading.availableData  // "ready PID"
        usleep(50_000)
        let pid = String(target.processIdentifier)
        let runs = quick ? 3 : 5
        for (name, arguments) in [("eu-stack", ["eu-stack", "-p", pid]),
                                  ("gdb", ["gdb", "-batch", "-p", pid, "-ex", "bt"])] {
            var seconds: [Double] = []
            for _ in 0..<runs {
                guard let timing = try? timeCommand(arguments), timing.status == 0 else { continue }
                seconds.append(timing.seconds * 1e6)
            }
            guard !seconds.isEmpty else {
                results.add(Figure(section: "capture", name: "\(name) -p PID", value: .nan, unit: "us",
                                   note: "\(name) not available or failed"))
                continue
            }
            let peer = Stats.median(seconds)
            results.add(Figure(section: "capture", name: "one stack: stallmon vs \(name) (wall, median)", value: ourWall,
                               unit: "us", peerName: name, peer: peer, ratio: peer / ourWall, ratioMeaning: "× faster",
                               target: name == "eu-stack" ? "≥ 300×" : nil))
        }
    }

    /// The loader hazard (a lock held for a list-lock holder) in a child process, with the image table and through
    /// the loader: captures that succeed, and whether the holder hangs in its handler.
    private func measureLoaderHazard(_ results: Results) throws {
        for throughLoader in [false, true] {
            let child = Process()
            child.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
            child.arguments = ["loader-hazard"] + (throughLoader ? ["--through-loader"] : [])
            let pipe = Pipe()
            child.standardOutput = pipe
            try child.run()
            let deadline = nowNanoseconds() + 30_000_000_000
            while child.isRunning && nowNanoseconds() < deadline { usleep(50_000) }
            if child.isRunning { kill(child.processIdentifier, SIGKILL) }
            child.waitUntilExit()
            let line = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                .trimmingCharacters(in: .whitespacesAndNewlines)
            // "captures N ok M; holder progress P → Q": a holder stuck in its handler makes no progress.
            let fields = line.split(separator: " ")
            let ok = fields.count > 3 ? Double(fields[3].trimmingCharacters(in: [";"])) ?? .nan : .nan
            let stuck = fields.count == 9 && fields[6] == fields[8]
            results.add(Figure(section: "capture",
                               name: throughLoader ? "  hazard, unwinding through the loader (before): captures ok"
                                                   : "hazard (lock held for a list-lock holder): captures ok",
                               value: ok, unit: "of 300",
                               note: (stuck ? "DEADLOCKED: the holder hangs in its handler; " : "no hang; ") + line))
        }
    }
}

/// What saying "waiting for what" adds to a sample, on the watchdog thread (the loop thread pays nothing: it is
/// asleep in its system call and /proc is read before the signal): a thread blocked reading a TCP connection on
/// 127.0.0.1, and one blocked on a pthread mutex another thread holds.
struct WaitResolutionCost {
    let quick: Bool

    /// What one run of the wait resolution measured (µs): a blocked read's first and later samples, a mutex's holder,
    /// and what each resolved to.
    private struct WaitTimings {
        var first: [Double] = []
        var cached: [Double] = []
        var lock: [Double] = []
        var seen: [String?] = [nil, nil]
    }

    /// The holder's own stack, sampled through a borrowed slot (µs), with the image table and through the loader.
    private struct HolderTimings {
        var walls: [Double]
        var pauses: [Double]
        var frames: Int
        var loaderPauses: [Double]
        var loaderStatuses: String
    }

    func run(_ results: Results) throws {
        let rounds = quick ? 200 : 2000
        let timings = measureWaits(rounds: rounds)
        let holder = measureHolderStacks(rounds: rounds)
        let (first, cached, lock, seen) = (timings.first, timings.cached, timings.lock, timings.seen)
        let (holderWall, holderPause, holderFrames) = (holder.walls, holder.pauses, holder.frames)
        let (loaderHolderPause, loaderStatuses) = (holder.loaderPauses, holder.loaderStatuses)
        print("  (a socket read: \(seen[0] ?? "not resolved"); a lock: \(seen[1] ?? "not resolved"); "
              + "the holder's stack: \(holderFrames) frames in \(holderWall.count) of \(rounds / 4) samples)")
        results.add(Figure(section: "capture", name: "what a blocked read waits on, per sample, median",
                           value: Stats.median(cached), unit: "us", target: "≤ 50 us",
                           note: String(format: "p99 %.1f us", Stats.percentile(cached, 0.99))))
        results.add(Figure(section: "capture", name: "  first sample of a stall (resolves the descriptor), median",
                           value: Stats.median(first), unit: "us",
                           note: String(format: "p99 %.1f us", Stats.percentile(first, 0.99))))
        results.add(Figure(section: "capture", name: "which thread holds a pthread mutex, per sample, median",
                           value: Stats.median(lock), unit: "us", target: "≤ 50 us",
                           note: String(format: "p99 %.1f us", Stats.percentile(lock, 0.99))))
        results.add(Figure(section: "capture", name: "  and the holder's own stack (state + capture), median",
                           value: Stats.median(holderWall), unit: "us", target: "≤ 50 us",
                           note: String(format: "p99 %.1f us", Stats.percentile(holderWall, 0.99))))
        results.add(Figure(section: "capture", name: "  holder's pause per sample (not the loop's), median",
                           value: Stats.median(holderPause), unit: "us",
                           note: String(format: "p99 %.1f us", Stats.percentile(holderPause, 0.99))))
        results.add(Figure(section: "capture", name: "    through the loader (before), median",
                           value: Stats.median(loaderHolderPause), unit: "us",
                           note: String(format: "p99 %.1f us; ", Stats.percentile(loaderHolderPause, 0.99))
                               + loaderStatuses))
    }

    /// A thread blocked reading a TCP connection on 127.0.0.1 and one blocked on a held pthread mutex: what each
    /// waits on, resolved `rounds` times.
    private func measureWaits(rounds: Int) -> WaitTimings {
        // A TCP connection whose peer never writes, read by a thread that blocks in read(2).
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(listener) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                bind(listener, raw, length) == 0 && listen(listener, 1) == 0 && getsockname(listener, raw, &length) == 0
            }
        }
        let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(client) }
        _ = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(client, $0, length) }
        }
        let reader = Atomic<Int32>(0)
        Thread.detachNewThread {
            reader.store(cstallmon_gettid(), ordering: .releasing)
            var byte: UInt8 = 0
            _ = read(client, &byte, 1)  // until the client is shut down below
        }
        let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        pthread_mutex_lock(mutex)
        let address_ = UInt(bitPattern: mutex)
        let waiter = Atomic<Int32>(0)
        Thread.detachNewThread {
            waiter.store(cstallmon_gettid(), ordering: .releasing)
            let lock = UnsafeMutablePointer<pthread_mutex_t>(bitPattern: address_)!
            pthread_mutex_lock(lock)
            pthread_mutex_unlock(lock)
        }
        usleep(50_000)  // both are asleep in their system calls by now
        defer {
            shutdown(client, Int32(SHUT_RDWR))
            pthread_mutex_unlock(mutex)
            usleep(10_000)
        }

        func time(_ tid: Int32, fresh: Bool, resolver: inout DescriptorResolver) -> (Double, String?) {
            if fresh { resolver = DescriptorResolver() }
            let start = nowNanoseconds()
            var target: String?
            if let call = SystemCall.current(tid: tid) {
                target = WaitTarget.of(call, waiter: tid) { resolver.resolve($0) }.target
            }
            return (Double(nowNanoseconds() - start) / 1e3, target)
        }
        var resolver = DescriptorResolver()
        var timings = WaitTimings()
        for round in 0..<rounds {
            let (micros, target) = time(reader.load(ordering: .acquiring), fresh: round % 20 == 0, resolver: &resolver)
            if round % 20 == 0 { timings.first.append(micros) } else { timings.cached.append(micros) }
            timings.seen[0] = target
            let (lockMicros, lockTarget) = time(waiter.load(ordering: .acquiring), fresh: false, resolver: &resolver)
            timings.lock.append(lockMicros)
            timings.seen[1] = lockTarget
        }
        return timings
    }

    /// A thread 30 frames deep that runs while it holds a lock, its stack sampled as a lock holder's.
    private func measureHolderStacks(rounds: Int) -> HolderTimings {
        // The holder's own stack: a thread 30 frames deep that runs while it holds the lock, sampled through a
        // slot borrowed for the stall (no warm-up on that thread: libunwind's plain unwinder).
        let stop = StopFlag()
        let holderTid = Atomic<Int32>(0)
        let holder = Thread {
            holderTid.store(cstallmon_gettid(), ordering: .releasing)
            _ = benchDescend(30, stop: stop)
        }
        holder.start()
        while holderTid.load(ordering: .acquiring) == 0 { usleep(1000) }
        usleep(20_000)
        /// The successful samples of one run: the watchdog's wall time and the holder's pause (µs), and frames.
        func holderSamples(throughLoader: Bool) -> (walls: [Double], pauses: [Double], frames: Int, statuses: String) {
            cstallmon_set_unwind_through_loader(throughLoader ? 1 : 0)
            defer { cstallmon_set_unwind_through_loader(0) }
            let sampler = HolderSampler(maxFrames: 128, timeout: .milliseconds(100), stacks: true)
            defer { sampler.endStall() }
            var run: (walls: [Double], pauses: [Double], frames: Int) = ([], [], 0)
            var statuses: [String: Int] = [:]
            for _ in 0..<(rounds / 4) {
                var scratch = ThreadSampler()
                let start = nowNanoseconds()
                let sample = sampler.sample(holderTid.load(ordering: .acquiring), sampler: &scratch)
                let wall = Double(nowNanoseconds() - start) / 1e3
                statuses[sample.status?.rawValue ?? "not signalled", default: 0] += 1
                guard sample.status == .ok else { continue }
                run.walls.append(wall)
                run.pauses.append(Double(sample.pauseNanoseconds) / 1e3)
                run.frames = sample.frames.count
            }
            let text = statuses.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
            return (run.walls, run.pauses, run.frames, text)
        }
        let (walls, pauses, frames, _) = holderSamples(throughLoader: false)
        // The same through the loader, as before the image table: every frame of a thread without warm-up is
        // looked up, so this is where the table shows.
        let (_, loaderPauses, _, loaderStatuses) = holderSamples(throughLoader: true)
        stop.set()
        return HolderTimings(walls: walls, pauses: pauses, frames: frames, loaderPauses: loaderPauses,
                             loaderStatuses: loaderStatuses)
    }
}

/// Direct use of the C capture, as the watchdog does, timing both sides.
struct StackCapturerForBench {
    let slot: Int32
    private let buffer = UnsafeMutablePointer<UInt>.allocate(capacity: 256)

    init(slot: Int32) {
        self.slot = slot
    }

    /// One capture: pause (signal sent → handler done), of it the handler's own run (entered → done), the
    /// watchdog's wall time, all µs, and the frames.
    func capture() -> (pause: Double, handler: Double, wall: Double, frames: Int) {
        var result = cstallmon_capture_result()
        let start = nowNanoseconds()
        cstallmon_capture(slot, buffer, 256, 100_000_000, &result)
        let wall = Double(nowNanoseconds() - start) / 1e3
        guard result.status == 0 else { return (0, 0, wall, 0) }
        return (Double(result.handler_done_ns - result.signal_sent_ns) / 1e3,
                Double(result.handler_done_ns - result.handler_entered_ns) / 1e3, wall, Int(result.frame_count))
    }
}
