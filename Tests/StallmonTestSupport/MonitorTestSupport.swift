import Foundation
import StallmonLoop
import StallmonReport

/// A fresh, empty directory under the system temp dir.
public func makeTemporaryDirectory(_ name: String = #function) -> String {
    let base = FileManager.default.temporaryDirectory.path + "/stallmon-tests"
    try? FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
    let safe = name.filter { $0.isLetter || $0.isNumber }
    let path = "\(base)/\(safe)-\(UUID().uuidString.prefix(8))"
    try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

/// Reports in `directory`, decoded.
public func readReports(_ directory: String) -> [StallReport] {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
    return names.filter { $0.hasPrefix("stall-") && $0.hasSuffix(".json") }.sorted().compactMap { name in
        guard let data = FileManager.default.contents(atPath: "\(directory)/\(name)") else { return nil }
        return try? JSONDecoder().decode(StallReport.self, from: data)
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
public func postChainedSpins(_ loop: Looper, count: Int, milliseconds: Int, label: LooperLabel = "chained") {
    guard count > 0 else { return }
    loop.perform(label: label) {
        _ = stallmonTestBusySpin(milliseconds: milliseconds)
        postChainedSpins(loop, count: count - 1, milliseconds: milliseconds, label: label)
    }
}
