import Foundation
@testable import Stallmon
@testable import StallmonReport
import StallmonTestSupport
import Testing

/// Code the line table marks line 0 (compiler-generated; Swift's debug builds mark so the call that advances a `for`
/// loop's iterator, which once left a spinning function's every sample, and so its top frame, without a line). A C
/// library compiled at test time places a call on line 0 with `#line 0`.
@Suite(.serialized)
struct LineZeroTests {
    static let source = """
        #include <stdint.h>

        volatile uintptr_t line_zero_seen;

        __attribute__((noinline)) void line_zero_callee(void) {
            line_zero_seen = (uintptr_t)__builtin_return_address(0);
        }

        int line_zero_caller(int value) {
            int doubled = value * 2;  // BEFORE
        #line 0
            line_zero_callee();
        #line 14
            return doubled + 1;
        }

        #line 0
        int line_zero_unlined(int value) { line_zero_callee(); return value; }
        """

    /// The return addresses of the two calls, from the library built with clang (whose assembler keeps line-0 rows;
    /// GNU as drops them). Nil, with the reason recorded, when no clang is found.
    static func returnAddresses() throws -> (caller: UInt, unlined: UInt, callee: UInt)? {
        // The Swift toolchain's own clang, beside `swift` on PATH, or a system one.
        let path = (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map { "\($0)/clang" }
        guard let compiler = path.first(where: { access($0, X_OK) == 0 }) ?? findTool("clang") else {
            Issue.record("no clang on PATH (the Swift toolchain has one)")
            return nil
        }
        let directory = makeTemporaryDirectory()
        try source.write(toFile: directory + "/line_zero.c", atomically: true, encoding: .utf8)
        let library = directory + "/libline_zero.so"
        let status = ChildProcess.run(compiler, ["-shared", "-fPIC", "-O0", "-g", "-o", library,
                                                 directory + "/line_zero.c"], outputPath: directory + "/cc.log")
        try #require(status == 0, "\((try? String(contentsOfFile: directory + "/cc.log", encoding: .utf8)) ?? "")")
        let handle = try #require(dlopen(library, RTLD_NOW))
        typealias Function = @convention(c) (Int32) -> Int32
        let seen = try #require(dlsym(handle, "line_zero_seen")).assumingMemoryBound(to: UInt.self)
        let callee = UInt(bitPattern: dlsym(handle, "line_zero_callee"))
        let caller = unsafeBitCast(try #require(dlsym(handle, "line_zero_caller")), to: Function.self)
        #expect(caller(20) == 41)
        let callerReturn = seen.pointee
        let unlined = unsafeBitCast(try #require(dlsym(handle, "line_zero_unlined")), to: Function.self)
        #expect(unlined(7) == 7)
        return (callerReturn, seen.pointee, callee)
    }

    @Test("a call on line 0 is given the line before it in its function, as llvm-symbolizer --skip-line-zero")
    func aCallOnLineZeroHasTheLineBeforeIt() throws {
        guard let addresses = try Self.returnAddresses() else { return }
        let before = try #require(Self.source.split(separator: "\n", omittingEmptySubsequences: false)
            .firstIndex { $0.hasSuffix("// BEFORE") }) + 1
        let symbolicator = Symbolicator()
        let caller = symbolicator.symbolize(addresses.caller, isReturnAddress: true)
        #expect(caller.symbol == "line_zero_caller")
        #expect(caller.file?.hasSuffix("line_zero.c") == true, "\(String(describing: caller.file))")
        #expect(caller.line == before, "line 0 took the line before it: \(String(describing: caller.line))")
        // In a report, and found again by offline symbolication, which reads the same file.
        let snapshot = StallSnapshot(
            id: "line-zero", loopName: "main", threadID: 1, thresholdNanoseconds: 1, since: 0, sinceWall: 0,
            durationNanoseconds: 1, durationExact: true, ongoing: false, elapsedAtDetection: 0, labelID: 0,
            samples: [RawSample(capturedAt: 1, status: .ok, frames: [addresses.callee, addresses.caller],
                                truncated: false, pauseNanoseconds: 1, labelID: 0)])
        let report = ReportBuilder(symbolicator: symbolicator).build(snapshot)
        let stack = try #require(report.samples.first?.frames).map { report.frames[$0] }
        #expect(stack.map(\.symbol) == ["line_zero_callee", "line_zero_caller"])
        #expect(stack.last?.line == before)
        var stripped = report
        stripped.frames = report.frames.map { frame in
            var frame = frame
            frame.symbol = nil
            frame.line = nil
            return frame
        }
        let again = OfflineSymbolicator(debugDirectories: []).symbolicate(stripped).report
        #expect(again.samples.first?.frames.map { again.frames[$0].line } == stack.map(\.line))
    }

    @Test("a function all on line 0 has no line: never the line of the function before it")
    func aFunctionAllOnLineZeroHasNoLine() throws {
        guard let addresses = try Self.returnAddresses() else { return }
        let unlined = Symbolicator().symbolize(addresses.unlined, isReturnAddress: true)
        #expect(unlined.symbol == "line_zero_unlined")
        #expect(unlined.file?.hasSuffix("line_zero.c") == true, "the file is known: \(String(describing: unlined.file))")
        #expect(unlined.line == nil, "\(String(describing: unlined.line))")
    }
}
