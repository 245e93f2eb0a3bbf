// swift-tools-version:6.2
// A real Hummingbird 2 service whose async route handlers block the global executor's workers, for
// ConcurrencyStallMonitorTests (the HummingbirdService tests). Built by scripts/test.sh into .build-hb; never a
// dependency of the stallmon package itself, so a service that depends on stallmon never resolves Hummingbird.
import PackageDescription

let package = Package(
    name: "hummingbird-stall-service",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.3"),
        // NIO only: the service needs no uploader (no HTTP client, no TLS to build).
        .package(name: "stallmon", path: "../..", traits: ["NIO"]),
    ],
    targets: [
        .executableTarget(
            name: "hb-stall-service",
            dependencies: [
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
                .product(name: "Stallmon", package: "stallmon"),
                .product(name: "StallmonNIO", package: "stallmon"),
            ],
            path: "Sources"
        ),
    ],
    swiftLanguageModes: [.v6]
)
