import Foundation
import StallmonTestSupport
import Testing

/// The package's products keep their promise (README, "Linking it into a service"): a service that links only
/// `Stallmon` (and `StallmonLifecycle`), without the `Upload` and `NIO` traits, compiles no NIO, HTTP client or TLS,
/// and still gets stall reports.
@Suite("package products", .serialized)
struct PackageProductsTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().standardizedFileURL.path
    /// Modules that only StallmonUpload may bring in.
    static let transportModules = ["AsyncHTTPClient", "NIOCore", "NIOPosix", "NIOHTTP1", "NIOSSL", "CompressNIO",
                                   "CNIOBoringSSL", "NIOTransportServices"]

    static func swiftExecutable() throws -> String {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        for directory in path.split(separator: ":") where FileManager.default.isExecutableFile(atPath: "\(directory)/swift") {
            return "\(directory)/swift"
        }
        throw ChildProcessError(description: "no swift on PATH")
    }

    @Test("the Stallmon target's dependency closure has no NIO, HTTP client or compression")
    func coreClosureHasNoTransport() async throws {
        let scratch = try TemporaryDirectory("stallmon-dump")
        defer { scratch.remove() }
        let output = scratch.path("dump.json")
        let swift = try Self.swiftExecutable()
        let status = try await offThePool { ChildProcess.run(swift,
                                      // A scratch path of its own: `swift test` holds the lock on the repository's .build.
                                      ["package", "--package-path", Self.repository,
                                       "--scratch-path", scratch.path("build"), "dump-package"],
                                      timeout: .seconds(120), outputPath: output) }
        #expect(status == 0)
        let data = try Data(contentsOf: URL(fileURLWithPath: output))
        let start = try #require(data.firstIndex(of: UInt8(ascii: "{")), "dump-package printed JSON")
        let package = try #require(try JSONSerialization.jsonObject(with: data[start...]) as? [String: Any])
        let targets = try #require(package["targets"] as? [[String: Any]])
        var byName: [String: [String]] = [:]
        for target in targets {
            guard let name = target["name"] as? String else { continue }
            byName[name] = Self.dependencyNames(target["dependencies"])
        }
        var closure = Set<String>()
        var queue = ["Stallmon"]
        while let next = queue.popLast() {
            guard closure.insert(next).inserted else { continue }
            queue.append(contentsOf: byName[next] ?? [])
        }
        #expect(closure.contains("StallmonLoop") && closure.contains("StallmonReport"))
        #expect(closure.contains("Logging") && closure.contains("Metrics"))
        for module in Self.transportModules {
            #expect(!closure.contains(module), "Stallmon depends on \(module): \(closure.sorted())")
        }
        #expect(byName["StallmonUpload"]?.contains("AsyncHTTPClient") == true, "the transport moved to StallmonUpload")
    }

    /// Every ```swift block of the documentation (README and articles) but the Package.swift excerpts, as a file
    /// that compiles it unchanged: the block's imports first, the rest as the body of a function.
    static func readmeSwiftSnippets() throws -> [String] {
        var sources: [String] = []
        for snippet in try DocumentedSnippets.all(repository: repository) {
            guard !(snippet.lines.first ?? "").hasPrefix("// Package.swift") else { continue }
            // StallmonNIO snippets need the NIO trait; StallmonNIOTests compiles them (ReadmeSnippets.swift).
            guard !snippet.lines.contains("import StallmonNIO") else { continue }
            // The Hummingbird middleware is compiled by Tests/HummingbirdService (HummingbirdServiceTests).
            guard !snippet.lines.contains("import Hummingbird") else { continue }
            // The Vapor middleware is compiled by Tests/VaporService (VaporServiceTests).
            guard !snippet.lines.contains("import Vapor") else { continue }
            let index = sources.count
            sources.append((snippet.imports + ["", "// \(snippet.file)", "func readmeSnippet\(index)() throws {"]
                            + snippet.body + ["}"]).joined(separator: "\n") + "\n")
        }
        return sources
    }

    /// Names in dump-package's dependency entries: `{"byName": ["X", null]}`, `{"product": ["X", "pkg", …]}`.
    static func dependencyNames(_ value: Any?) -> [String] {
        guard let entries = value as? [[String: Any]] else { return [] }
        return entries.compactMap { entry in
            for key in ["byName", "target", "product"] {
                if let parts = entry[key] as? [Any], let name = parts.first as? String { return name }
            }
            return nil
        }
    }

    @Test("a package that depends on Stallmon alone builds without NIO and reports a stall")
    func coreOnlyPackageBuildsAndReports() async throws {
        let scratch = try TemporaryDirectory("stallmon-core-only")
        defer { scratch.remove() }
        // A path dependency is named after its folder (SwiftPM), whatever the clone is called.
        let packageName = URL(fileURLWithPath: Self.repository).lastPathComponent
        try FileManager.default.createDirectory(atPath: scratch.path("Sources/CoreOnly"),
                                                withIntermediateDirectories: true)
        try scratch.write("Package.swift", """
            // swift-tools-version:6.1
            import PackageDescription
            let package = Package(
                name: "CoreOnly",
                // Leave out `Upload` and `NIO`, which the core does not need (SwiftPM builds every target of a
                // dependency, so only a trait keeps async-http-client and NIO out of the build); `Lifecycle` runs
                // monitors as a swift-service-lifecycle Service without NIO.
                dependencies: [
                    .package(path: "\(Self.repository)", traits: ["Lifecycle"]),
                    .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
                    .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
                ],
                targets: [
                    .executableTarget(name: "CoreOnly", dependencies: [
                        .product(name: "Stallmon", package: "\(packageName)"),
                        .product(name: "StallmonLoop", package: "\(packageName)"),
                        .product(name: "StallmonLifecycle", package: "\(packageName)"),
                        // Without the trait it spools only, and brings no HTTP client.
                        .product(name: "StallmonUpload", package: "\(packageName)"),
                        .product(name: "Logging", package: "swift-log"),
                        .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                    ]),
                ]
            )
            """)
        try scratch.write("Sources/CoreOnly/main.swift", """
            import Glibc
            import Stallmon
            import StallmonLoop

            @inline(never) func coreOnlySpin(milliseconds: Int) -> UInt64 {
                let end = MonotonicInstant.now().advanced(by: .milliseconds(milliseconds))
                var value: UInt64 = 1
                while MonotonicInstant.now() < end { value = value &* 6364136223846793005 &+ 1 }
                return value
            }

            /// Until `condition` holds, 30 s at most: a loaded machine runs the watchdog and the writer late.
            func waitUntil(_ condition: () -> Bool) {
                let end = MonotonicInstant.now().advanced(by: .seconds(30))
                while !condition() && MonotonicInstant.now() < end { _ = coreOnlySpin(milliseconds: 1) }
            }

            let loop = try Looper(name: "core-only")
            let configuration = StallMonitorConfiguration(detection: .init(threshold: .milliseconds(50)),
                                                          reports: .init(directory: CommandLine.arguments[1]))
            let monitor = try LooperStallMonitor(loop: loop, configuration: configuration)
            monitor.start()
            loop.perform(label: "spin") {
                _ = coreOnlySpin(milliseconds: 150)
                waitUntil { monitor.statistics.stallsDetected >= 1 }
            }
            loop.run(for: .milliseconds(700))
            waitUntil { monitor.statistics.reportsWritten >= 1 }
            print("reports written: \\(monitor.statistics.reportsWritten)")
            // Someone replaces the sampling signal's handler with SIG_DFL (for a real-time signal: terminate the
            // process). The next stall must be timed and reported, and the signal never sent.
            _ = signal(try configuration.detection.signal.resolve(), SIG_DFL)
            loop.perform(label: "spin-after-replacement") {
                _ = coreOnlySpin(milliseconds: 150)
                waitUntil { monitor.statistics.stallsDetected >= 2 }
            }
            loop.run(for: .milliseconds(700))
            monitor.stop()
            print("after replacement: \\(monitor.statistics.reportsWritten) reports, alive")

            // Descriptors exhausted: creating a monitor fails with a clear error instead of a writer that never wakes.
            var limits = rlimit()
            _ = getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limits)
            var low = rlimit(rlim_cur: 128, rlim_max: limits.rlim_max)
            _ = setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &low)
            var fillers: [Int32] = []
            while case let fd = open("/dev/null", O_RDONLY), fd >= 0 { fillers.append(fd) }
            do {
                _ = try LooperStallMonitor(loop: loop, configuration: configuration)
                print("no descriptors: created anyway")
            } catch {
                print("no descriptors: \\(error)")
            }
            for fd in fillers { close(fd) }
            """)
        // A service that watches only async code runs its monitor as a Service, with no NIO in the build.
        try scratch.write("Sources/CoreOnly/Lifecycle.swift", """
            import Logging
            import ServiceLifecycle
            import Stallmon
            import StallmonLifecycle

            func asyncOnlyServiceGroup(logger: Logger) throws -> ServiceGroup {
                let monitor = try ConcurrencyStallMonitor(mainActor: false)
                return ServiceGroup(services: [StallMonitorService(monitor)], gracefulShutdownSignals: [.sigterm],
                                    logger: logger)
            }
            """)
        // The documentation's Swift snippets compile as written (each in a function of its own, its imports on top).
        let snippets = try Self.readmeSwiftSnippets()
        #expect(snippets.count >= 6, "the README and the articles have their snippets: \(snippets.count)")
        for (index, snippet) in snippets.enumerated() {
            try scratch.write("Sources/CoreOnly/Readme\(index).swift", snippet)
        }
        let log = scratch.path("build.log")
        let swift = try Self.swiftExecutable()
        let package = scratch.path
        let build = try await offThePool {
            ChildProcess.run(swift, ["build", "--package-path", package], timeout: .seconds(900), outputPath: log)
        }
        let buildOutput = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        try #require(build == 0, "swift build failed:\n\(buildOutput.suffix(4000))")
        let products = scratch.path(".build/debug")
        let built = (try? FileManager.default.contentsOfDirectory(atPath: products)) ?? []
        #expect(built.contains("Stallmon.build"), "\(built.sorted())")
        #expect(built.contains("StallmonLifecycle.build") && built.contains("ServiceLifecycle.build"), "\(built.sorted())")
        for module in Self.transportModules {
            #expect(!built.contains("\(module).build"), "compiled \(module): \(built.sorted())")
        }
        let reports = scratch.path("reports")
        let runLog = scratch.path("run.log")
        let run = try await offThePool {
            ChildProcess.run(products + "/CoreOnly", [reports], timeout: .seconds(60), outputPath: runLog)
        }
        let runOutput = (try? String(contentsOfFile: runLog, encoding: .utf8)) ?? ""
        #expect(run == 0, "\(runOutput)")
        #expect(runOutput.contains("reports written: 1"), "\(runOutput)")
        #expect(runOutput.contains("after replacement: 2 reports, alive"), "not killed by its own signal: \(runOutput)")
        #expect(runOutput.contains("handler was replaced"), "logged: \(runOutput)")
        #expect(runOutput.contains("no descriptors: cannot create the monitor's wake-up eventfd"), "\(runOutput)")
        let names = (try? FileManager.default.contentsOfDirectory(atPath: reports)) ?? []
        #expect(names.filter { $0.hasPrefix("stall-") && $0.hasSuffix(".json") }.count == 2, "\(names)")
    }
}
