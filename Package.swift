// swift-tools-version:6.1
import PackageDescription

// One product per concern; a service links only what it uses (README, "Architecture"):
//   StallmonLoop    the run loop (`Looper`): CFRunLoop-style observers, modes and nested runs, a Swift Concurrency
//                   executor, and the probe a monitor attaches to it
//   Stallmon        the monitor: probe, watchdog, capture, analysis, report writing, event log, configuration; the
//                   `Looper`'s monitor and Swift Concurrency's global executor's (ConcurrencyStallMonitor).
//                   swift-log, swift-metrics, swift-distributed-tracing's Instrumentation (a request's trace ids),
//                   libunwind and libdw only: no NIO, HTTP or TLS.
//   StallmonReport  the `stallmon.report/1` contract and its read side: types, reader, skimmer, summaries, the
//                   Chrome/Perfetto timeline
//   StallmonProfiles  (a target, not a product) stall samples as profiles: pprof's profile.proto and OTLP profiles,
//                   with swift-protobuf (the generated code is committed: scripts/generate-protos.sh)
//   StallmonUpload  spool, batching and retry decisions, OTLP/NDJSON payloads, the async-http-client transport;
//                   plugs into the monitor as a `StallReportSink`. The transport is behind the `Upload` trait (on by
//                   default): a service that wants no HTTP client or TLS in its build depends with `traits: []`,
//                   since SwiftPM builds every target of a dependency's package, used or not.
//   StallmonNIO     monitors SwiftNIO event loops (any MultiThreadedEventLoopGroup, `.singleton` included); behind
//                   the `NIO` trait (on by default), and re-exports StallmonLifecycle
//   StallmonLifecycle  runs monitors as a swift-service-lifecycle Service (StallMonitorService), with or without NIO;
//                   behind the `Lifecycle` trait (on by default, and with NIO)
//   stallmon        the CLI (demo, report, show, tail, symbolicate, snapshot, upload): links everything
// C targets hold what Swift cannot do or import: CStallmonMeasure (the clock, the busy-time histogram, the CPU affinity),
// CStallmonLoopShims (epoll, eventfd, ppoll; the seccomp probe),
// CStallmonCapture (the signal handler and libunwind capture), CStallmonSymbols (libdw symbolication),
// CStallmonConcurrency (the global executor's hooks and per-worker probes).
// Linux only: the capture, the loop and /proc are Linux's (see Sources/Stallmon/Monitor/Platform.swift).
let package = Package(
    name: "stallmon",
    products: [
        .library(name: "Stallmon", targets: ["Stallmon"]),
        .library(name: "StallmonLoop", targets: ["StallmonLoop"]),
        .library(name: "StallmonReport", targets: ["StallmonReport"]),
        .library(name: "StallmonUpload", targets: ["StallmonUpload"]),
        .library(name: "StallmonNIO", targets: ["StallmonNIO"]),
        .library(name: "StallmonLifecycle", targets: ["StallmonLifecycle"]),
        .executable(name: "stallmon", targets: ["stallmon"]),
    ],
    traits: [
        .trait(name: "Upload", description: "In-process upload of reports over HTTP (async-http-client, SwiftNIO, "
            + "compress-nio): StallmonUpload's Uploader and `stallmon upload`. Without it, StallmonUpload spools only."),
        .trait(name: "NIO", description: "StallmonNIO: monitoring of SwiftNIO event loops (swift-nio; enables "
            + "Lifecycle). Without it, StallmonNIO is empty.", enabledTraits: ["Lifecycle"]),
        .trait(name: "Lifecycle", description: "StallmonLifecycle: monitors run as a swift-service-lifecycle Service "
            + "(StallMonitorService), NIO or not. Without it, StallmonLifecycle is empty."),
        .default(enabledTraits: ["Upload", "NIO", "Lifecycle"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/adam-fowler/compress-nio", from: "1.5.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-protobuf", from: "1.39.0"),
    ],
    targets: [
        // The clock and the busy-time histogram every C target and Swift measure with (header-inlined).
        .target(name: "CStallmonMeasure"),
        .target(
            name: "CStallmonLoopShims",
            dependencies: ["CStallmonMeasure"],
            cSettings: [.define("_GNU_SOURCE")]
        ),
        .target(
            name: "CStallmonCapture",
            dependencies: ["CStallmonMeasure", "CStallmonLoopShims"],
            exclude: ["DESIGN.md"],
            cSettings: [.define("_GNU_SOURCE")],
            linkerSettings: [.linkedLibrary("unwind")]
        ),
        .target(
            name: "CStallmonSymbols",
            cSettings: [.define("_GNU_SOURCE")],
            linkerSettings: [.linkedLibrary("dw"), .linkedLibrary("elf"), .linkedLibrary("stdc++")]
        ),
        // Swift Concurrency's global executor, its jobs timed per worker (see its header for why).
        .target(name: "CStallmonConcurrency", dependencies: ["CStallmonMeasure", "CStallmonLoopShims"],
                cSettings: [.define("_GNU_SOURCE")]),
        // What only the tests and the bench call of CStallmonConcurrency (declarations; defined there).
        .target(name: "CStallmonConcurrencyTesting", dependencies: ["CStallmonConcurrency"]),
        // Defines epoll_wait: timestamps around a SwiftNIO loop's selector waits (see its header for why).
        .target(name: "CStallmonNIOHook", dependencies: ["CStallmonMeasure"], cSettings: [.define("_GNU_SOURCE")]),
        .target(
            name: "StallmonLoop",
            dependencies: ["CStallmonLoopShims"]
        ),
        .target(name: "StallmonReport"),
        .target(
            name: "StallmonProfiles",
            dependencies: ["StallmonReport", .product(name: "SwiftProtobuf", package: "swift-protobuf")]
        ),
        // Before-main set-up of the CLI (stop signals of `stallmon upload --daemon`).
        .target(name: "CStallmonCLI", cSettings: [.define("_GNU_SOURCE")]),
        .target(
            name: "Stallmon",
            dependencies: [
                "StallmonLoop",
                "StallmonReport",
                "CStallmonLoopShims",
                "CStallmonCapture",
                "CStallmonSymbols",
                "CStallmonConcurrency",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Instrumentation", package: "swift-distributed-tracing"),
            ]
        ),
        .target(
            name: "StallmonUpload",
            dependencies: [
                "Stallmon",
                "StallmonReport",
                "StallmonProfiles",
                "CStallmonLoopShims",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "AsyncHTTPClient", package: "async-http-client", condition: .when(traits: ["Upload"])),
                .product(name: "NIOCore", package: "swift-nio", condition: .when(traits: ["Upload"])),
                .product(name: "NIOPosix", package: "swift-nio", condition: .when(traits: ["Upload"])),
                .product(name: "NIOHTTP1", package: "swift-nio", condition: .when(traits: ["Upload"])),
                .product(name: "CompressNIO", package: "compress-nio", condition: .when(traits: ["Upload"])),
            ]
        ),
        .target(
            name: "StallmonLifecycle",
            dependencies: [
                "Stallmon",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle",
                         condition: .when(traits: ["Lifecycle"])),
            ]
        ),
        .target(
            name: "StallmonNIO",
            dependencies: [
                "Stallmon",
                "StallmonLifecycle",
                "StallmonLoop",
                "StallmonReport",
                "CStallmonLoopShims",
                .target(name: "CStallmonNIOHook", condition: .when(traits: ["NIO"])),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio", condition: .when(traits: ["NIO"])),
                .product(name: "NIOPosix", package: "swift-nio", condition: .when(traits: ["NIO"])),
            ]
        ),
        .executableTarget(
            name: "stallmon",
            dependencies: [
                "Stallmon",
                "StallmonLoop",
                "StallmonReport",
                "StallmonProfiles",
                "StallmonUpload",
                "CStallmonCLI",
                "CStallmonLoopShims",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                // gzip for `report --pprof` (pprof files are gzipped; written plain without the Upload trait).
                .product(name: "NIOCore", package: "swift-nio", condition: .when(traits: ["Upload"])),
                .product(name: "CompressNIO", package: "compress-nio", condition: .when(traits: ["Upload"])),
            ]
        ),
        // The benchmarks behind README "Performance" (run through scripts/bench.sh, release build).
        .executableTarget(
            name: "stallmon-bench",
            dependencies: [
                "Stallmon", "StallmonLoop", "StallmonReport", "StallmonUpload", "StallmonNIO", "CStallmonCapture",
                "CStallmonConcurrency", "CStallmonConcurrencyTesting", "CStallmonLoopShims",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Instrumentation", package: "swift-distributed-tracing"),
            ]
        ),
        // A child process of ConcurrencyStallMonitorTests: plain Swift Concurrency that stalls the global executor.
        .executableTarget(
            name: "stallmon-async-fixture",
            dependencies: ["Stallmon", "StallmonLoop", "StallmonNIO", "CStallmonCapture", "CStallmonConcurrency",
                           "CStallmonConcurrencyTesting",
                           "CStallmonLoopShims", .product(name: "NIOCore", package: "swift-nio"),
                           .product(name: "NIOPosix", package: "swift-nio"),
                           .product(name: "Instrumentation", package: "swift-distributed-tracing"),
                           .product(name: "Logging", package: "swift-log")],
            path: "Tests/StallmonAsyncFixture"
        ),
        .testTarget(name: "StallmonLoopTests", dependencies: ["StallmonLoop"]),
        .testTarget(name: "StallmonReportTests", dependencies: ["StallmonReport", "StallmonTestSupport"]),
        .testTarget(name: "StallmonProfilesTests",
                    dependencies: ["StallmonProfiles", "StallmonReport", "StallmonTestSupport",
                                   .product(name: "SwiftProtobuf", package: "swift-protobuf")]),
        .testTarget(
            name: "StallmonTests",
            dependencies: [
                "Stallmon", "StallmonLoop", "StallmonReport", "CStallmonCapture", "CStallmonConcurrency",
                "CStallmonConcurrencyTesting", "CStallmonLoopShims",
                "StallmonUpload",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "InMemoryLogging", package: "swift-log"),
                .product(name: "Instrumentation", package: "swift-distributed-tracing"),
                "StallmonTestSupport",
            ]
        ),
        .testTarget(
            name: "StallmonUploadTests",
            dependencies: [
                "StallmonUpload", "Stallmon", "StallmonLoop", "StallmonReport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "InMemoryLogging", package: "swift-log"),
                "StallmonTestSupport",
            ]
        ),
        .testTarget(
            name: "StallmonNIOTests",
            dependencies: [
                "StallmonNIO", "StallmonLifecycle", "Stallmon", "StallmonLoop", "StallmonReport", "CStallmonLoopShims",
                "CStallmonNIOHook", "StallmonTestSupport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "StallmonLifecycleTests",
            dependencies: [
                "StallmonLifecycle", "Stallmon", "StallmonLoop", "StallmonReport", "StallmonTestSupport",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "StallmonCLITests",
            dependencies: [
                "Stallmon", "StallmonReport", "StallmonUpload", "StallmonTestSupport",
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The fault suite crosses modules: captures under churn, SIGKILLs of the writer and uploader, bad disks,
        // seeded mutations of every input.
        .testTarget(
            name: "StallmonFaultTests",
            dependencies: [
                "Stallmon", "StallmonLoop", "StallmonReport", "StallmonUpload", "CStallmonCapture", "CStallmonLoopShims",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "InMemoryLogging", package: "swift-log"),
                "StallmonTestSupport",
            ]
        ),
        // Shared by the test targets: a scripted HTTP collector (receiver.py) on 127.0.0.1.
        .target(name: "StallmonTestSupport", dependencies: ["StallmonLoop", "StallmonReport", "Stallmon", "StallmonUpload"],
                path: "Tests/StallmonTestSupport",
                exclude: ["receiver.py"]),
    ],
    swiftLanguageModes: [.v6]
)
