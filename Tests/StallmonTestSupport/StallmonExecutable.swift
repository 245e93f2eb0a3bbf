import Foundation

/// The `stallmon` executable built next to the test binary, for the test targets that run it.
public enum StallmonExecutable {
    public struct NotFound: Error, CustomStringConvertible {
        public let description: String
    }

    /// The directories that may hold the executable: the test binary's directory, the main bundle and its parent
    /// (on macOS the `.xctest` bundle sits beside the products).
    public static var candidateDirectories: [URL] {
        var candidates: [URL] = []
        if let first = CommandLine.arguments.first {
            let url = URL(fileURLWithPath: first).standardizedFileURL
            candidates.append(url.deletingLastPathComponent())
            candidates.append(url.resolvingSymlinksInPath().deletingLastPathComponent())
        }
        candidates.append(Bundle.main.bundleURL)
        candidates.append(Bundle.main.bundleURL.deletingLastPathComponent())
        if let executable = Bundle.main.executableURL {
            candidates.append(executable.deletingLastPathComponent())
        }
        for bundle in Bundle.allBundles where bundle.bundlePath.hasSuffix(".xctest") {
            candidates.append(bundle.bundleURL.deletingLastPathComponent())
        }
        var seen = Set<String>()
        return candidates.filter { seen.insert($0.standardizedFileURL.path).inserted }
    }

    /// The executable, or an error naming every place looked at.
    public static func url() throws(NotFound) -> URL {
        try url(named: "stallmon")
    }

    /// An executable of this package built next to the test bundle (`stallmon`, `stallmon-async-fixture`).
    public static func url(named name: String) throws(NotFound) -> URL {
        for directory in candidateDirectories {
            let url = directory.appendingPathComponent(name)
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: url.path, isDirectory: &isDirectory), !isDirectory.boolValue,
               FileManager.default.isExecutableFile(atPath: url.path)
            {
                return url
            }
        }
        throw NotFound(description: "no `\(name)` executable next to the test bundle; looked in: "
            + candidateDirectories.map(\.path).joined(separator: ", ")
            + ". Build it with `swift build --build-tests` (it builds the executable too).")
    }

    /// The test process's environment without any `STALLMON_*` variable, so the caller's shell cannot change what
    /// the CLI does; `overrides` are then added.
    public static func environment(_ overrides: [String: String] = [:]) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("STALLMON_") }
        for (key, value) in overrides { environment[key] = value }
        return environment
    }
}
