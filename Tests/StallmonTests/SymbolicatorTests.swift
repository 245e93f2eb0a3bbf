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
        let monitor = try LooperStallMonitor(loop: loop, configuration: .init(
            detection: .init(threshold: .milliseconds(50)), reports: .init(directory: directory)))
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

    /// A `--static-swift-stdlib` build links Foundation, the runtime and every dependency into the executable, and
    /// `--build-path` may put the checkouts anywhere (or DWARF is stripped): in-app by Swift module (issue 26, 12).
    @Test("in-app by Swift module in a static build: Foundation, the stdlib and dependencies are not the service's")
    func inAppByModuleInStaticBuilds() {
        let exe = "/srv/app/bin/app"
        func inApp(_ symbol: String, file: String? = nil, rules: InAppRules = InAppRules()) -> Bool {
            Symbolicator.isInApp(module: exe, symbol: symbol, file: file, executable: exe, rules: rules)
        }
        let encoderClosure = "closure #1 (FoundationEssentials.(__JSONEncoder in _2537)) throws -> () in "
            + "FoundationEssentials.(__JSONEncoder in _2537).wrapGeneric<A, B where A: Swift.Encodable>(_: A) throws"
        #expect(Symbolicator.swiftModule(of: encoderClosure) == "FoundationEssentials")
        #expect(!inApp(encoderClosure), "Foundation linked into the executable")
        #expect(!inApp("closure #1 () -> () in Swift.Array.sort()"))
        #expect(!inApp("closure #1 in _Concurrency.Task.init()"))
        #expect(!inApp("merged $defer #1 <A>() -> () in FoundationEssentials.(__JSONEncoder in _2537).wrap<A>(_: A)"))
        #expect(!inApp("merged lazy protocol witness table accessor for type App.Order and conformance App.Order"))
        #expect(!inApp("destroy value witness for FoundationEssentials.(_JSONKeyedEncodingContainer in _2537)"))
        // A SwiftPM build directory elsewhere (--build-path): it holds workspace-state.json.
        let scratch = NSTemporaryDirectory() + "stallmon-scratch-\(getpid())"
        try? FileManager.default.createDirectory(atPath: scratch + "/checkouts", withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: scratch + "/workspace-state.json", contents: Data("{}".utf8))
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        #expect(!inApp("static Ledger.Book.post() -> ()", file: scratch + "/checkouts/ledger/Sources/Ledger/Book.swift"),
                "a checkout under any --build-path")
        #expect(inApp("static App.Server.run() -> ()", file: "/home/me/checkouts/myservice/Sources/App/Server.swift"),
                "a directory merely named checkouts is not SwiftPM's")
        #expect(inApp("HummingbirdTodos.TodoController.list() -> ()"), "a service module named like a dependency")
        #expect(inApp("GRPCServer.Greeter.sayHello() -> ()"))
        #expect(!inApp("Hummingbird.Router.respond() -> ()"))
        #expect(!inApp("generic specialization <Swift.Int> of NIOCore.EventLoopFuture.map<A>((A) -> Swift.Int) -> ()"),
                "a dependency's generic specialized into the binary")
        #expect(Symbolicator.swiftModule(of: "function signature specialization <Arg[0] = Dead> of App.Cart.total() -> Swift.Int")
                == "App")
        #expect(inApp("function signature specialization <Arg[0] = Dead> of App.Cart.total() -> Swift.Int"))
        #expect(!inApp("static ArgumentParser.ParsableCommand.main() -> ()"), "a dependency without DWARF")
        #expect(!inApp("NIOPosix.SelectableEventLoop.run() throws -> ()"))
        #expect(!inApp("closure #3 in Hummingbird.Router.respond()"))
        #expect(inApp("closure #1 (App.Order) -> () in App.Checkout.encode()"), "the service's closure")
        #expect(inApp("static ArgumentParser.ParsableCommand.main() -> ()",
                      rules: InAppRules(include: ["ArgumentParser"])), "include overrides a known dependency")
        #expect(!inApp(encoderClosure, rules: InAppRules(include: ["FoundationEssentials"])),
                "the toolchain is never the service's")
    }

    @Test("in_app_include / in_app_exclude parse as module lists, and refuse anything else")
    func inAppKeys() throws {
        let loaded = try StallMonitorConfiguration.load(file: nil, environment: [
            "STALLMON_IN_APP_INCLUDE": "ArgumentParser, MyKit", "STALLMON_IN_APP_EXCLUDE": "",
        ])
        #expect(loaded.analysis.inApp == InAppRules(include: ["ArgumentParser", "MyKit"], exclude: []))
        #expect(throws: ConfigurationError.self) {
            _ = try StallMonitorConfiguration.load(file: nil, environment: ["STALLMON_IN_APP_EXCLUDE": "a/b"])
        }
    }
}
