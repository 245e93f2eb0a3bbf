import Foundation
import Testing

/// Executables scripts/test.sh builds besides this package's debug build: the Hummingbird service (a package of its
/// own) and the async fixture built with `--static-swift-stdlib`.
enum BuiltByTestScript {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().path

    /// The executable at `relativePath` (from the repository), or nil when it was not built: then an issue when the
    /// environment variable `requiredBy` is "1" (scripts/test.sh sets it, so CI must run the test), else a printed
    /// reason (a plain `swift test`). `builtAs` says how scripts/test.sh builds it.
    static func executable(_ relativePath: String, requiredBy variable: String, builtAs: String) -> String? {
        let path = repository + "/" + relativePath
        if FileManager.default.isExecutableFile(atPath: path) { return path }
        if ProcessInfo.processInfo.environment[variable] == "1" {
            Issue.record("\(path) is missing: scripts/test.sh builds it (\(builtAs))")
        } else {
            print("skipped: \(path) is not built (scripts/test.sh builds it: \(builtAs))")
        }
        return nil
    }
}
