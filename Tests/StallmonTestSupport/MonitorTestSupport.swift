import Foundation
import StallmonLoop
import StallmonReport
import Testing

/// A fresh, empty directory under the system temp dir.
public func makeTemporaryDirectory(_ name: String = #function) -> String {
    let base = FileManager.default.temporaryDirectory.path + "/stallmon-tests"
    try? FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
    let safe = name.filter { $0.isLetter || $0.isNumber }
    let path = "\(base)/\(safe)-\(UUID().uuidString.prefix(8))"
    try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

/// Reports in `directory`, decoded. A report file that cannot be read or decoded is an issue of the calling test:
/// before, it was dropped, so every "no report" check passed with a corrupt report present (issue 41, item 8).
public func readReports(_ directory: String, sourceLocation: SourceLocation = #_sourceLocation) -> [StallReport] {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
    return names.filter { $0.hasPrefix("stall-") && $0.hasSuffix(".json") }.sorted().compactMap { name in
        do {
            guard let data = FileManager.default.contents(atPath: "\(directory)/\(name)") else {
                Issue.record("report \(name) cannot be read", sourceLocation: sourceLocation)
                return nil
            }
            return try JSONDecoder().decode(StallReport.self, from: data)
        } catch {
            Issue.record("report \(name) does not decode: \(error)", sourceLocation: sourceLocation)
            return nil
        }
    }
}

/// Burns CPU on the calling thread for `milliseconds`; never inlined so it shows up in stacks by name.
@inline(never)
public func stallmonTestBusySpin(milliseconds: Int) -> UInt64 {
    let end = MonotonicInstant.now().advanced(by: .milliseconds(milliseconds))
    var accumulator: UInt64 = 1
    while MonotonicInstant.now() < end {
        for value in 0..<1000 { accumulator = accumulator &* 6364136223846793005 &+ UInt64(value) }
    }
    return accumulator
}

/// nanosleep that resumes after EINTR, as code sampled by a signal must (see README, "What sampling costs"); never
/// inlined so it shows up in stacks by name.
@inline(never)
public func stallmonTestSleep(milliseconds: Int) {
    var request = timespec(tv_sec: milliseconds / 1000, tv_nsec: (milliseconds % 1000) * 1_000_000)
    var remaining = timespec()
    while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
}

/// Runs `loop` on a new thread; returns the thread so the test can join it.
public func runOnThread(_ loop: Looper, for duration: Duration) -> Thread {
    let done = DispatchSemaphore(value: 0)
    let thread = Thread {
        loop.run(for: duration)
        done.signal()
    }
    thread.start()
    return thread
}

/// Waits until `condition` holds or `timeout` passes; returns whether it held.
public func eventually(timeout: Duration = .seconds(5), _ condition: () -> Bool) -> Bool {
    let deadline = MonotonicInstant.now().advanced(by: timeout)
    while MonotonicInstant.now() < deadline {
        if condition() { return true }
        usleep(5_000)
    }
    return condition()
}

/// Runs `count` busy spins of `milliseconds` each on `loop`, one per loop pass: each block posts the next, so the
/// loop returns to epoll between them. (Blocks queued together run in one pass, which is one long iteration.)
///
/// With `detected` (a monitor's `statistics.stallsDetected`), each spin goes on until the count moved: a watchdog a
/// loaded machine runs late still sees every stall (a fixed spin just past the threshold gives it a window of a few
/// tens of milliseconds). Past 30 s it stops waiting, and the test's own checks say what is missing. `then` runs
/// on the loop, in the pass after the last spin (say, `loop.stop()`).
public func postChainedSpins(_ loop: Looper, count: Int, milliseconds: Int, label: LooperLabel = "chained",
                             detected: (@Sendable () -> Int)? = nil, then: (@Sendable () -> Void)? = nil) {
    guard count > 0 else {
        if let then { loop.perform(then) }
        return
    }
    loop.perform(label: label) {
        spinUntilDetected(milliseconds: milliseconds, detected: detected)
        postChainedSpins(loop, count: count - 1, milliseconds: milliseconds, label: label, detected: detected,
                         then: then)
    }
}

/// Spins `milliseconds`, then, with `detected`, on until it moved from its value before the spin (30 s at most).
public func spinUntilDetected(milliseconds: Int, detected: (@Sendable () -> Int)?) {
    guard let detected else {
        _ = stallmonTestBusySpin(milliseconds: milliseconds)
        return
    }
    let before = detected()
    stallmonTestBusySpin(milliseconds: milliseconds) { detected() != before }
}

/// Spins (in `stallmonTestBusySpin`) `milliseconds`, then on until `done()`, 30 s at most: a stall that lasts until
/// a watchdog a loaded machine runs late has seen what the test needs of it. Past the 30 s the test's own checks say
/// what is missing.
public func stallmonTestBusySpin(milliseconds: Int, thenUntil done: () -> Bool) {
    let deadline = ContinuousClock.now + .seconds(30)
    _ = stallmonTestBusySpin(milliseconds: milliseconds)
    while !done() && ContinuousClock.now < deadline { _ = stallmonTestBusySpin(milliseconds: 1) }
}

/// Code that stalled a loop, timed by itself on CLOCK_MONOTONIC (`MonotonicInstant`, `cstallmon_monotonic_ns`).
public struct MeasuredStall: Sendable {
    public var startNs: UInt64
    public var endNs: UInt64
    public var milliseconds: Double { Double(endNs - startNs) / 1e6 }

    public init(startNs: UInt64, endNs: UInt64) {
        self.startNs = startNs
        self.endNs = endNs
    }

    /// Runs `body`, timed by itself.
    public static func timing(_ body: () -> Void) -> MeasuredStall {
        let start = MonotonicInstant.now().nanoseconds
        body()
        return MeasuredStall(startNs: start, endNs: MonotonicInstant.now().nanoseconds)
    }

    /// What is wrong with `report` as the stall of the iteration that ran this code, or nil.
    ///
    /// The iteration encloses the code: it begins before it (and not before `notBeforeNs`: the end of the code that
    /// stalled the iteration before, say), and ends after it; the frozen time the report sets aside from
    /// `durationMs` still lies between its start and its end. Its end may follow the code's by the rest of the
    /// iteration (answering a request: `tailSlackMs`), plus the time the thread waited for a CPU and the time the
    /// watchdog judged the process frozen, both of which the report measures from the watchdog's first sight of the
    /// iteration busy. Its start may precede the code's by the iteration's work before it (reading and decoding a
    /// request in a debug build) plus the waits for a CPU then, which nothing measures: `notBeforeNs` and the generous
    /// `headLimitMs` bound it.
    public func problem(with report: StallReport, notBeforeNs: UInt64 = 0, tailSlackMs: Double = 15,
                        headLimitMs: Double = 1_000) -> String? {
        func millisecondsBetween(_ later: UInt64, _ earlier: UInt64) -> Double {
            Double(Int64(bitPattern: later &- earlier)) / 1e6
        }
        let frozen = report.frozenMs ?? 0
        let reportStart = report.start.monotonicNs
        let reportEnd = reportStart + UInt64((report.durationMs + frozen) * 1e6)
        let head = millisecondsBetween(startNs, reportStart)
        let tail = millisecondsBetween(reportEnd, endNs)
        let runDelay = report.threadStats?.runDelayMs ?? 0
        let figures = "the iteration began \(head) ms before the code and ended \(tail) ms after it "
            + "(reported \(report.durationMs) ms + \(frozen) ms frozen, code \(milliseconds) ms, "
            + "run delay \(runDelay) ms, duration from \(report.durationSource))"
        // The duration goes through milliseconds as a Double: a few nanoseconds of rounding.
        let rounding = 0.001
        guard head >= -rounding, tail >= -rounding else { return "not enclosed: \(figures)" }
        guard tail <= tailSlackMs + runDelay + frozen else { return "ended late: \(figures)" }
        guard reportStart >= notBeforeNs else {
            return "began \(millisecondsBetween(notBeforeNs, reportStart)) ms before it could have: \(figures)"
        }
        guard head <= headLimitMs else { return "began far too early: \(figures)" }
        return nil
    }
}

extension StallReport {
    /// Whether this stall is a near miss that waiting for a CPU pushed over the threshold, by its own figures: short
    /// (under twice the threshold, frozen time included) and under the threshold once the time its thread waited for
    /// a CPU is taken off. A test's own stalls must then last at least twice the threshold, or be told apart otherwise
    /// (by when they ran): a heavily delayed one would look the same.
    /// On a loaded 2-core machine any short job (a test's 60 ms near miss, a start-up check's task) can be one, and is
    /// rightly reported; a test that counts the stalls it caused leaves these out. (The wait is measured from the
    /// watchdog's first sight of the job busy; a near miss's spin ends at a deadline, so what pushed it over is the
    /// wait around that deadline, which is measured.)
    public var isNearMissPushedOverByWaitingForACPU: Bool {
        kind == nil && durationMs + (frozenMs ?? 0) < 2 * thresholdMs
            && durationMs - (threadStats?.runDelayMs ?? 0) < thresholdMs
    }
}
