import Foundation
@testable import Stallmon
@testable import StallmonReport
import StallmonTestSupport
import Testing

/// Inlined functions from DWARF: a C library compiled with -O2 -g at test time, whose innermost call sits two
/// always_inline functions deep, checked against the source's own line numbers and binutils' `addr2line -i`.
@Suite(.serialized)
struct InlinedFrameTests {
    static let source = """
        #include <stdint.h>

        volatile uintptr_t inline_probe_return;

        __attribute__((noinline)) void inline_probe(void) {
            inline_probe_return = (uintptr_t)__builtin_return_address(0);
            __asm__ volatile("" ::: "memory");
        }

        static inline __attribute__((always_inline)) int inline_leaf(int value) {
            inline_probe();  // LEAF
            return value * 3;
        }

        static inline __attribute__((always_inline)) int inline_middle(int value) {
            return inline_leaf(value + 1) + 2;  // MIDDLE
        }

        int inline_outer(int value) {
            return inline_middle(value) * 5;  // OUTER
        }
        """

    /// The library, loaded, and the return address its probe recorded (inside two inlined functions).
    struct Loaded {
        let path: String
        let probe: UInt
        let returnAddress: UInt
        let lines: [String: Int]
    }

    static func load() throws -> Loaded {
        let compiler = try #require(findTool("cc", "gcc", "clang"), "no C compiler")
        let library = try TestLibrary(source, named: "inline_probe", compiler: compiler, flags: ["-O2", "-g"])
        typealias Outer = @convention(c) (Int32) -> Int32
        let outer = unsafeBitCast(try library.address(of: "inline_outer"), to: Outer.self)
        #expect(outer(1) == 40)  // ((1 + 1) * 3 + 2) * 5
        let recorded = try library.address(of: "inline_probe_return").assumingMemoryBound(to: UInt.self)
        let probe = UInt(bitPattern: try library.address(of: "inline_probe"))
        var lines: [String: Int] = [:]
        for marker in ["LEAF", "MIDDLE", "OUTER"] { lines[marker] = library.line(marked: marker) }
        return Loaded(path: library.path, probe: probe, returnAddress: recorded.pointee, lines: lines)
    }

    /// binutils' `addr2line -i -f` for `offset` in `module`: (function, line) innermost first.
    static func addr2line(module: String, offset: String) throws -> [(function: String, line: Int?)] {
        let process = Process()
        let output = Pipe()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["addr2line", "-i", "-f", "-e", module, offset]
        process.standardOutput = output
        try process.run()
        process.waitUntilExit()
        let lines = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            .split(separator: "\n").map(String.init)
        return stride(from: 0, to: lines.count - 1, by: 2).map { index in
            let location = lines[index + 1].split(separator: " ")[0]  // file:line (discriminator N)
            return (lines[index], location.split(separator: ":").last.flatMap { Int($0) })
        }
    }

    @Test func inlinedFunctionsBecomeFramesWithTheirOwnLines() throws {
        let loaded = try Self.load()
        let symbolicator = Symbolicator()
        let symbolized = symbolicator.symbolize(loaded.returnAddress, isReturnAddress: true)
        #expect(symbolized.symbol == "inline_outer")
        #expect(symbolized.inlined.map(\.symbol) == ["inline_leaf", "inline_middle"])
        #expect(symbolized.inlined.map(\.line) == [loaded.lines["LEAF"], loaded.lines["MIDDLE"]])
        #expect(symbolized.line == loaded.lines["OUTER"], "the physical frame's line is the outermost call site")

        let reference = try Self.addr2line(module: loaded.path, offset: hex(try #require(symbolized.moduleOffset)))
        let ours = symbolized.inlined.map { ($0.symbol ?? "?", $0.line) } + [(symbolized.symbol ?? "?", symbolized.line)]
        #expect(reference.map(\.function) == ours.map(\.0))
        #expect(reference.map(\.line) == ours.map(\.1))
    }

    @Test func reportsCarryInlinedFramesAndOfflineSymbolicationFindsThemAgain() throws {
        let loaded = try Self.load()
        let symbolicator = Symbolicator()
        let report = TestLibrary.oneSampleReport([loaded.probe, loaded.returnAddress], symbolicator: symbolicator)
        let stack = try #require(report.samples.first?.frames).map { report.frames[$0] }
        #expect(stack.map(\.symbol) == ["inline_probe", "inline_leaf", "inline_middle", "inline_outer"])
        #expect(stack.map(\.inlined) == [nil, true, true, nil])
        #expect(stack.map(\.line) == [stack[0].line, loaded.lines["LEAF"], loaded.lines["MIDDLE"], loaded.lines["OUTER"]])
        #expect(Set(stack.dropFirst().map(\.address)).count == 1, "inlined frames share their physical address")
        #expect(StallProfile.folded([report]) == "inline_outer;inline_middle_[i];inline_leaf_[i];inline_probe 1\n")

        // Offline: the inlined frames are dropped, found again from the file, and the samples re-pointed.
        let again = TestLibrary.symbolicatedAgainOffline(report)
        #expect(again.samples.first?.frames.map { again.frames[$0].symbol } == stack.map(\.symbol))
        #expect(again.samples.first?.frames.map { again.frames[$0].line } == stack.map(\.line))
        #expect(again.frames.count == report.frames.count)
    }
}
