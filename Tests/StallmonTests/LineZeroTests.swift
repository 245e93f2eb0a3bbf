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
    static func returnAddresses() throws -> (caller: UInt, unlined: UInt, callee: UInt, before: Int?)? {
        // The Swift toolchain's own clang, beside `swift` on PATH, or a system one.
        let path = (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map { "\($0)/clang" }
        guard let compiler = path.first(where: { access($0, X_OK) == 0 }) ?? findTool("clang") else {
            Issue.record("no clang on PATH (the Swift toolchain has one)")
            return nil
        }
        let library = try TestLibrary(source, named: "line_zero", compiler: compiler, flags: ["-O0", "-g"])
        typealias Function = @convention(c) (Int32) -> Int32
        let seen = try library.address(of: "line_zero_seen").assumingMemoryBound(to: UInt.self)
        let callee = UInt(bitPattern: try library.address(of: "line_zero_callee"))
        let caller = unsafeBitCast(try library.address(of: "line_zero_caller"), to: Function.self)
        #expect(caller(20) == 41)
        let callerReturn = seen.pointee
        let unlined = unsafeBitCast(try library.address(of: "line_zero_unlined"), to: Function.self)
        #expect(unlined(7) == 7)
        return (callerReturn, seen.pointee, callee, library.line(marked: "BEFORE"))
    }

    @Test("a call on line 0 is given the line before it in its function, as llvm-symbolizer --skip-line-zero")
    func aCallOnLineZeroHasTheLineBeforeIt() throws {
        guard let addresses = try Self.returnAddresses() else { return }
        let before = try #require(addresses.before)
        let symbolicator = Symbolicator()
        let caller = symbolicator.symbolize(addresses.caller, isReturnAddress: true)
        #expect(caller.symbol == "line_zero_caller")
        #expect(caller.file?.hasSuffix("line_zero.c") == true, "\(String(describing: caller.file))")
        #expect(caller.line == before, "line 0 took the line before it: \(String(describing: caller.line))")
        // In a report, and found again by offline symbolication, which reads the same file.
        let report = TestLibrary.oneSampleReport([addresses.callee, addresses.caller], symbolicator: symbolicator)
        let stack = try #require(report.samples.first?.frames).map { report.frames[$0] }
        #expect(stack.map(\.symbol) == ["line_zero_callee", "line_zero_caller"])
        #expect(stack.last?.line == before)
        let again = TestLibrary.symbolicatedAgainOffline(report)
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
