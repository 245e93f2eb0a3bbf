import CStallmonCapture
import Foundation
import Stallmon
import StallmonLoop
import Synchronization

/// One measured figure; `peer` holds the same figure for the tool named in `peerName`, measured in the same run.
struct Figure: Codable {
    var section: String
    var name: String
    var value: Double
    var unit: String
    var peerName: String?
    var peer: Double?
    /// ours / peer or peer / ours, as `ratioMeaning` says.
    var ratio: Double?
    var ratioMeaning: String?
    var target: String?
    var note: String?
}

/// Collects figures and prints them as a table.
final class Results {
    private(set) var figures: [Figure] = []

    func add(_ figure: Figure) {
        figures.append(figure)
        print(Results.row(figure))
    }

    static func row(_ figure: Figure) -> String {
        var text = "  " + figure.name.padding(toLength: 52, withPad: " ", startingAt: 0)
            + format(figure.value, figure.unit).padding(toLength: 16, withPad: " ", startingAt: 0)
        if let peer = figure.peer, let name = figure.peerName {
            text += "\(name) \(format(peer, figure.unit))".padding(toLength: 26, withPad: " ", startingAt: 0)
        }
        if let ratio = figure.ratio, let meaning = figure.ratioMeaning {
            text += String(format: "%.4g", ratio) + " " + meaning + "  "
        }
        if let target = figure.target { text += "[target \(target)]" }
        return text
    }

    static func format(_ value: Double, _ unit: String) -> String {
        switch unit {
        case "ns": return String(format: "%.1f ns", value)
        case "us": return String(format: "%.1f µs", value)
        case "ms": return String(format: "%.2f ms", value)
        case "s": return String(format: "%.2f s", value)
        case "%": return String(format: "%.2f %%", value)
        case "MiB": return String(format: "%.2f MiB", value)
        case "/s": return String(format: "%.0f /s", value)
        default: return String(format: "%.4g %@", value, unit)
        }
    }
}

enum Stats {
    static func median(_ values: [Double]) -> Double { percentile(values, 0.5) }

    /// Nearest-rank percentile.
    static func percentile(_ values: [Double], _ fraction: Double) -> Double {
        guard !values.isEmpty else { return .nan }
        let sorted = values.sorted()
        let rank = Int((fraction * Double(sorted.count)).rounded(.up))
        return sorted[min(max(rank, 1), sorted.count) - 1]
    }
}

/// A mutable box for loop-thread-only counters in @Sendable closures.
final class Box<Value>: @unchecked Sendable {
    var value: Value
    init(_ value: Value) { self.value = value }
}

func nowNanoseconds() -> UInt64 { MonotonicInstant.now().nanoseconds }

/// Resident set size of this process, bytes.
func residentBytes() -> Double {
    guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
    let fields = text.split(separator: " ")
    return (Double(fields.count > 1 ? fields[1] : "0") ?? 0) * Double(sysconf(Int32(_SC_PAGESIZE)))
}

/// Runs a command (stdout and stderr to /dev/null), returns wall seconds, exit status and the child's peak RSS (MiB).
/// posix_spawn + wait4 rather than Foundation's Process, which reaps children itself and would race us for the
/// resource usage.
@discardableResult
func timeCommand(_ arguments: [String]) throws -> (seconds: Double, status: Int32, peakMiB: Double) {
    // fork, not posix_spawn: glibc's posix_spawn shares this process's memory until the exec (vfork), and the kernel
    // then counts this process's resident set as the child's peak (ru_maxrss), hiding the child's own.
    var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
    defer { argv.forEach { free($0) } }
    let devNull = open("/dev/null", O_WRONLY | O_CLOEXEC)
    defer { close(devNull) }
    let program = argv[0]!
    let start = nowNanoseconds()
    let pid = fork()
    if pid == 0 {
        // The child: only async-signal-safe calls until the exec.
        _ = dup2(devNull, 1)
        _ = dup2(devNull, 2)
        _ = argv.withUnsafeMutableBufferPointer { execvp(program, $0.baseAddress!) }
        _exit(127)
    }
    guard pid > 0 else { throw BenchError("cannot fork: \(String(cString: strerror(errno)))") }
    var status: Int32 = 0
    var usage = rusage()
    while wait4(pid, &status, 0, &usage) < 0 && errno == EINTR {}
    let seconds = Double(nowNanoseconds() - start) / 1e9
    return (seconds, (status >> 8) & 0xff, Double(usage.ru_maxrss) / 1024)
}

/// Spins for `milliseconds` of wall time; never inlined, so stacks show it.
@inline(never)
func benchSpin(milliseconds: Double) -> UInt64 {
    let end = nowNanoseconds() + UInt64(milliseconds * 1e6)
    var accumulator: UInt64 = 1
    while nowNanoseconds() < end {
        for value in 0..<200 { accumulator = accumulator &* 6364136223846793005 &+ UInt64(value) }
    }
    return accumulator
}

/// A fixed amount of arithmetic, about 2 µs on this machine: the body of the "work" loop.
@inline(never)
func benchWork(_ seed: UInt64) -> UInt64 {
    var accumulator = seed
    for value in 0..<1500 { accumulator = accumulator &* 6364136223846793005 &+ UInt64(value) }
    return accumulator
}

/// A flag another thread sets to end a spin.
final class StopFlag: Sendable {
    private let flag = Atomic<Bool>(false)
    func set() { flag.store(true, ordering: .relaxed) }
    var isSet: Bool { flag.load(ordering: .relaxed) }
}

/// Recurses `depth` frames, then spins until `stop` is set: a thread stalled in a known, deep stack.
/// Unoptimized so that release builds keep one real frame per level.
@inline(never)
@_optimize(none)
func benchDescend(_ depth: Int, stop: StopFlag) -> Int {
    if depth == 0 {
        var spins = 0
        while !stop.isSet { spins &+= 1 }
        return spins
    }
    return benchDescend(depth - 1, stop: stop) &+ depth  // not a tail call: every frame stays on the stack
}

/// This whole process's CPU time so far (user and system), in seconds.
func processCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec)
        + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

/// CPU time of each of this process's threads so far, summed by thread name (its kernel `comm`), in nanoseconds:
/// schedstat's first field, exact where getrusage's is tick-based.
func threadCPUByName() -> [String: UInt64] {
    var byName: [String: UInt64] = [:]
    let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
    for task in tasks {
        guard let comm = try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8),
              let schedstat = try? String(contentsOfFile: "/proc/self/task/\(task)/schedstat", encoding: .utf8),
              let onCPU = schedstat.split(separator: " ").first.flatMap({ UInt64($0) }) else { continue }
        byName[comm.trimmingCharacters(in: .whitespacesAndNewlines), default: 0] += onCPU
    }
    return byName
}

/// The floor of an idle watchdog pass on this machine: a thread that sleeps `interval` ns at a time on the watchdog's
/// own wait (`WakeSignal`: an eventfd with a timeout), then, with `freezeReading`, reads what a freeze is
/// judged from (the process's CPU clock, getrusage, its own schedstat). Returns its CPU per wake-up, µs, from
/// CLOCK_THREAD_CPUTIME_ID, over `seconds`.
func bareWakeCost(interval: UInt64, freezeReading: Bool, seconds: Double) -> Double {
    let result = Mutex<Double>(0)
    let thread = Thread {
        let wake = WakeSignal()
        let schedstat = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC)
        defer { close(schedstat) }
        var buffer = [UInt8](repeating: 0, count: 128)
        func threadCPU() -> UInt64 {
            var time = timespec()
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
            return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
        }
        let wakes = max(1, Int(seconds * 1e9 / Double(interval)))
        let start = threadCPU()
        for _ in 0..<wakes {
            wake.wait(until: nowNanoseconds() + interval)
            if freezeReading {
                var time = timespec()
                var usage = rusage()
                clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time)
                getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
                _ = buffer.withUnsafeMutableBytes { pread(schedstat, $0.baseAddress, $0.count, 0) }
            }
        }
        let perWake = Double(threadCPU() - start) / 1000 / Double(wakes)
        result.withLock { $0 = perWake }
    }
    thread.start()
    while !thread.isFinished { usleep(50_000) }
    return result.withLock { $0 }
}
