import Foundation
@testable import Stallmon
import StallmonTestSupport
import Testing

/// "On the loop thread the monitor does no … syscalls" (README), counted: a monitored Looper's thread, over 300 timer
/// iterations, makes the same kinds of system calls as the same loop unmonitored, and no more of them than a few
/// (issue 41, item 8: no test held this). Under strace, the loop thread's calls between its two getppid() marks.
struct LoopThreadSyscallTests {
    /// The system calls, by name, the loop thread made between its marks.
    static func loopThreadCalls(scenario: String) async throws -> [String: Int] {
        let strace = try #require(findTool("strace"), "strace (scripts/test.sh installs it)")
        let fixture = try StallmonExecutable.url(named: "stallmon-async-fixture").path
        let root = makeTemporaryDirectory("syscalls-\(scenario)")
        let trace = root + "/trace"
        let status = try await offThePool {
            ChildProcess.run(strace, ["-f", "-qq", "-o", trace, fixture, scenario, root + "/reports", "1000"],
                             timeout: .seconds(120), environment: StallmonExecutable.environment(),
                             outputPath: root + "/out")
        }
        try #require(status == 0, "\((try? String(contentsOfFile: root + "/out", encoding: .utf8)) ?? "")")
        let lines = try String(contentsOfFile: trace, encoding: .utf8).split(separator: "\n")
        // `PID name(args) = result`: the loop thread is the one that called getppid.
        let marks = lines.filter { $0.contains(" getppid()") }
        try #require(marks.count == 2, "two marks: \(marks)")
        let tid = try #require(marks.first?.split(separator: " ").first.map(String.init))
        var inside = false
        var calls: [String: Int] = [:]
        for line in lines where line.hasPrefix(tid + " ") {
            let call = line.dropFirst(tid.count + 1).prefix { $0 != "(" }
            if call == "getppid" {
                inside.toggle()
                continue
            }
            if inside && !call.hasPrefix("<...") && !call.hasPrefix("---") { calls[String(call), default: 0] += 1 }
        }
        return calls
    }

    @Test func theMonitorAddsNoSystemCallOnTheLoopThread() async throws {
        let monitored = try await Self.loopThreadCalls(scenario: "quiet-loop")
        let unmonitored = try await Self.loopThreadCalls(scenario: "quiet-loop-unmonitored")
        let added = Set(monitored.keys).subtracting(unmonitored.keys)
        #expect(added.isEmpty, "calls only the monitored loop made: \(added.sorted()) (\(monitored))")
        // The loop's own calls (its waits), about one per iteration either way.
        let total = monitored.values.reduce(0, +)
        let baseline = unmonitored.values.reduce(0, +)
        #expect(total <= baseline + baseline / 2 + 20, "monitored \(monitored), unmonitored \(unmonitored)")
    }
}
