import Foundation
@testable import Stallmon
import StallmonLoop
@testable import StallmonReport
import StallmonTestSupport
import Testing

struct SymbolicatorTests {
    @Test func swiftNamesAreDemangled() {
        #expect(Symbolicator.demangle("$s13StallmonTests20stallmonTestBusySpin12millisecondss6UInt64VSi_tF")
            == "StallmonTests.stallmonTestBusySpin(milliseconds: Swift.Int) -> Swift.UInt64")
        #expect(Symbolicator.demangle("_ZNSt6vectorIiSaIiEE9push_backERKi").hasPrefix("std::vector<int"))
        #expect(Symbolicator.demangle("plain_c_function") == "plain_c_function")
    }

    @Test func symbolsAndLinesMatchBinutilsAddr2line() throws {
        // A frame from a real capture: the spinning function, symbolicated by the writer thread.
        let directory = makeTemporaryDirectory()
        let loop = try Looper(name: "symbols")
        let monitor = try StallMonitor(loop: loop, configuration: .init(threshold: .milliseconds(50),
                                                                         reportDirectory: directory))
        monitor.start()
        loop.perform { _ = stallmonTestBusySpin(milliseconds: 120) }
        loop.run(for: .milliseconds(300))
        monitor.stop()
        let report = try #require(readReports(directory).first)
        let spinning = report.frames.filter { $0.symbol?.contains("stallmonTestBusySpin") == true }
        #expect(!spinning.isEmpty)
        #expect(spinning.contains { $0.line != nil }, "at least one sampled address has a line")
        for ours in spinning {
            #expect(ours.inApp)
            let module = try #require(ours.module)
            let offset = try #require(ours.offset)
            // The reference: binutils' addr2line on the same file and offset.
            let process = Process()
            let output = Pipe()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = ["addr2line", "-e", module, offset]
            process.standardOutput = output
            try process.run()
            process.waitUntilExit()
            let reference = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                .split(separator: " ")[0].trimmingCharacters(in: .whitespacesAndNewlines)  // file:line (discriminator N)
            let file = ours.file.map { String($0.split(separator: "/").last!) } ?? "?"
            let expected = ours.line.map { "\(file):\($0)" } ?? ":?"
            #expect(reference.hasSuffix(expected), "\(offset): addr2line says \(reference), we say \(expected)")
        }
    }
}
