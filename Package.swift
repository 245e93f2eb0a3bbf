// swift-tools-version:6.1
import PackageDescription

// Layout mirrors the architecture:
//   CStallmonLoopShims  epoll / eventfd / timerfd syscalls Swift's Glibc module does not export
//   CStallmonCapture    the signal handler and libunwind capture (async-signal-safe core), image list
//   CStallmonSymbols    libdw symbolication (never called from the handler or the loop thread)
//   StallmonLoop        the run loop (`Looper`) with CFRunLoop-style observers
//   Stallmon            the monitor: probe, watchdog, writer, reports, event log, configuration
//   stallmon            the CLI: demo, report, show, tail
let package = Package(
    name: "stallmon",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Stallmon", targets: ["Stallmon"]),
        .library(name: "StallmonLoop", targets: ["StallmonLoop"]),
        .executable(name: "stallmon", targets: ["stallmon"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/adam-fowler/compress-nio", from: "1.5.0"),
    ],
    targets: [
        .target(
            name: "CStallmonLoopShims",
            cSettings: [.define("_GNU_SOURCE")]
        ),
        .target(
            name: "CStallmonCapture",
            cSettings: [.define("_GNU_SOURCE")],
            linkerSettings: [.linkedLibrary("unwind")]
        ),
        .target(
            name: "CStallmonSymbols",
            cSettings: [.define("_GNU_SOURCE")],
            linkerSettings: [.linkedLibrary("dw"), .linkedLibrary("elf"), .linkedLibrary("stdc++")]
        ),
        .target(
            name: "StallmonLoop",
            dependencies: ["CStallmonLoopShims"]
        ),
        .target(
            name: "Stallmon",
            dependencies: [
                "StallmonLoop",
                "CStallmonLoopShims",
                "CStallmonCapture",
                "CStallmonSymbols",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "CompressNIO", package: "compress-nio"),
            ]
        ),
        .executableTarget(
            name: "stallmon",
            dependencies: [
                "Stallmon",
                "StallmonLoop",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The benchmarks behind README "Performance" (run through scripts/bench.sh, release build).
        .executableTarget(
            name: "stallmon-bench",
            dependencies: [
                "Stallmon", "StallmonLoop", "CStallmonCapture",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(name: "StallmonLoopTests", dependencies: ["StallmonLoop"]),
        .testTarget(
            name: "StallmonTests",
            dependencies: [
                "Stallmon", "StallmonLoop", "CStallmonCapture",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "InMemoryLogging", package: "swift-log"),
                "StallmonTestSupport",
            ]
        ),
        .testTarget(name: "StallmonCLITests", dependencies: ["Stallmon", "StallmonTestSupport"]),
        // Shared by the test targets: a scripted HTTP collector (receiver.py) on 127.0.0.1.
        .target(name: "StallmonTestSupport", path: "Tests/StallmonTestSupport", exclude: ["receiver.py"]),
    ],
    swiftLanguageModes: [.v6]
)
