import Foundation
@testable import Stallmon
import StallmonTestSupport
import Testing

/// "On the loop thread the monitor does no allocations, … syscalls" (README), counted: a monitored Looper's thread, over
/// 300 timer iterations, makes the same system calls and allocations as the same loop unmonitored (issue 41, item 8:
/// no test held this). The window is the loop thread's two getppid() marks, a call nothing else in the fixture makes.
struct LoopThreadCostTests {
    /// Under strace: the system calls, by name, the loop thread made between its marks.
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

    /// An LD_PRELOAD library that counts, on the thread that calls getppid(), every allocation between its first and
    /// second call, and then writes `allocations N` to stderr. It allocates through glibc's own entry points, so it
    /// needs no dlsym (which may allocate) and no lock.
    static let allocationCounterSource = #"""
        #define _GNU_SOURCE
        #include <stdlib.h>
        #include <string.h>
        #include <sys/syscall.h>
        #include <unistd.h>

        extern void *__libc_malloc(size_t);
        extern void *__libc_calloc(size_t, size_t);
        extern void *__libc_realloc(void *, size_t);
        extern void *__libc_memalign(size_t, size_t);

        static __thread int marks __attribute__((tls_model("initial-exec")));
        static __thread unsigned long allocations __attribute__((tls_model("initial-exec")));

        static inline void counted(void) { if (marks == 1) allocations++; }

        void *malloc(size_t size) { counted(); return __libc_malloc(size); }
        void *calloc(size_t count, size_t size) { counted(); return __libc_calloc(count, size); }
        void *realloc(void *pointer, size_t size) { counted(); return __libc_realloc(pointer, size); }
        void *memalign(size_t alignment, size_t size) { counted(); return __libc_memalign(alignment, size); }
        void *aligned_alloc(size_t alignment, size_t size) { counted(); return __libc_memalign(alignment, size); }
        int posix_memalign(void **out, size_t alignment, size_t size) {
            counted();
            void *pointer = __libc_memalign(alignment, size);
            if (pointer == NULL) return 12;
            *out = pointer;
            return 0;
        }

        pid_t getppid(void) {
            if (++marks == 2) {
                char line[48] = "allocations ";
                size_t length = strlen(line);
                char digits[24];
                int count = 0;
                unsigned long value = allocations;
                do { digits[count++] = (char)('0' + value % 10); value /= 10; } while (value != 0);
                while (count > 0) line[length++] = digits[--count];
                line[length++] = '\n';
                (void)write(2, line, length);
            }
            return (pid_t)syscall(SYS_getppid);
        }
        """#

    /// The allocations the loop thread made between its marks, with the counter preloaded.
    static func loopThreadAllocations(scenario: String) async throws -> Int {
        let fixture = try StallmonExecutable.url(named: "stallmon-async-fixture").path
        let root = makeTemporaryDirectory("allocations-\(scenario)")
        let library = try CCompiler.build(allocationCounterSource, named: "count-allocations", in: root,
                                          output: root + "/count-allocations.so", flags: ["-O1", "-shared", "-fPIC"])
        let environment = StallmonExecutable.environment().merging(["LD_PRELOAD": library]) { $1 }
        let status = try await offThePool {
            ChildProcess.run(fixture, [scenario, root + "/reports", "1000"], timeout: .seconds(120),
                             environment: environment, outputPath: root + "/out")
        }
        let output = (try? String(contentsOfFile: root + "/out", encoding: .utf8)) ?? ""
        try #require(status == 0, "\(output)")
        let counts = output.split(separator: "\n").filter { $0.hasPrefix("allocations ") }
        try #require(counts.count == 1, "one count: \(output)")
        return try #require(Int(counts[0].dropFirst("allocations ".count)), "\(counts[0])")
    }

    @Test func theMonitorAddsNoAllocationOnTheLoopThread() async throws {
        let monitored = try await Self.loopThreadAllocations(scenario: "quiet-loop")
        let unmonitored = try await Self.loopThreadAllocations(scenario: "quiet-loop-unmonitored")
        // The loop's own allocations (its timers) vary by a few between runs; a monitor that allocated once per
        // iteration would add about 300.
        #expect(monitored <= unmonitored + 30, "monitored \(monitored) allocations, unmonitored \(unmonitored)")
    }
}
