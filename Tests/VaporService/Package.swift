// swift-tools-version:6.2
// A real Vapor 4 service whose async route handlers block the global executor's workers, for VaporServiceTests.
// Built by scripts/test.sh into .build-vapor; never a dependency of the stallmon package itself, so a service that
// depends on stallmon never resolves Vapor.
import PackageDescription

let package = Package(
    name: "vapor-stall-service",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(url: "https://github.com/vapor/vapor", from: "4.122.3"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        // NIO only: the service needs no uploader (no HTTP client of stallmon's, no TLS of its own to build).
        .package(name: "stallmon", path: "../..", traits: ["NIO"]),
    ],
    targets: [
        .executableTarget(
            name: "vapor-stall-service",
            dependencies: [
                .product(name: "Vapor", package: "vapor"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Stallmon", package: "stallmon"),
                .product(name: "StallmonNIO", package: "stallmon"),
            ],
            path: "Sources"
        ),
    ],
    swiftLanguageModes: [.v6]
)
