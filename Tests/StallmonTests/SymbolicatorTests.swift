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
        loop.perform { _ = stallmonTestBusySpin(milliseconds: 250) }  // ~20 samples, so some land on a line
        loop.run(for: .milliseconds(450))
        monitor.stop()
        let report = try #require(readReports(directory).first)
        let spinning = report.frames.filter { $0.symbol?.contains("stallmonTestBusySpin") == true }
        #expect(!spinning.isEmpty)
        let described = spinning.map { "\($0.symbol ?? "") \($0.file ?? "-"):\($0.line ?? -1) inlined \($0.inlined ?? false)" }
        #expect(spinning.contains { $0.line != nil }, "at least one sampled address has a line: \(described)")
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

    @Test("in-app: dependencies from package checkouts, compiler helpers and runtime are not the service's code")
    func inAppRules() {
        let exe = "/srv/app/bin/app"
        func inApp(_ symbol: String?, file: String? = nil, rules: InAppRules = InAppRules()) -> Bool {
            Symbolicator.isInApp(module: exe, symbol: symbol, file: file, executable: exe, rules: rules)
        }
        #expect(inApp("App.Server.handle(request:)", file: "/src/app/Sources/App/Server.swift"))
        #expect(!inApp("static ArgumentParser.ParsableCommand.main() -> ()",
                       file: "/src/app/.build/checkouts/swift-argument-parser/Sources/ArgumentParser/X.swift"),
                "a package checkout is a dependency")
        #expect(!inApp("__swift_instantiateConcreteTypeFromMangledName"), "compiler-emitted helper")
        #expect(!inApp("swift_retain"))
        #expect(!inApp("static App.Main.$main() -> ()", file: "<compiler-generated>"))
        #expect(!inApp("outlined copy of App.Order"))
        #expect(!inApp("type metadata accessor for App.Order"))
        #expect(!inApp("generic specialization <Swift.Int> of Swift.Array.append(_:)"))
        // Configurable by Swift module.
        let mine = InAppRules(include: ["ArgumentParser"], exclude: ["AppKitShim"])
        #expect(inApp("static ArgumentParser.ParsableCommand.main() -> ()",
                      file: "/src/app/.build/checkouts/swift-argument-parser/Sources/ArgumentParser/X.swift",
                      rules: mine), "included although checked out")
        #expect(!inApp("closure #1 in AppKitShim.draw()", rules: mine))
        #expect(Symbolicator.swiftModule(of: "closure #2 in static App.Server.run()") == "App")
        #expect(Symbolicator.swiftModule(of: "(extension in ArgumentParser):ArgumentParser.ParsableCommand.main()")
                == "ArgumentParser")
        #expect(Symbolicator.swiftModule(of: "pthread_mutex_lock") == nil)
    }

    @Test("in_app_include / in_app_exclude parse as module lists, and refuse anything else")
    func inAppKeys() throws {
        let loaded = try StallMonitorConfiguration.load(file: nil, environment: [
            "STALLMON_IN_APP_INCLUDE": "ArgumentParser, MyKit", "STALLMON_IN_APP_EXCLUDE": "",
        ])
        #expect(loaded.inApp == InAppRules(include: ["ArgumentParser", "MyKit"], exclude: []))
        #expect(throws: ConfigurationError.self) {
            _ = try StallMonitorConfiguration.load(file: nil, environment: ["STALLMON_IN_APP_EXCLUDE": "a/b"])
        }
    }
}
