import Foundation
@testable import Stallmon
@testable import StallmonReport
import StallmonTestSupport
import Testing

/// What one run of a non-stallmon tool (chromium, strip, objcopy) produced.
struct ToolResult: Sendable, CustomStringConvertible {
    var command: [String]
    var status: Int32
    var timedOut: Bool
    var stdout: String
    var stderr: String

    var description: String {
        "\(command.joined(separator: " ")) → status \(status)\(timedOut ? " TIMED OUT" : "")\n--- stdout ---\n"
            + "\(stdout.prefix(4000))\n--- stderr ---\n\(stderr.prefix(4000))"
    }
}

/// Runs other programs for the tests, with a timeout, output through files.
enum ExternalTool {
    /// The executable named `name` on PATH (or in /usr/bin, /bin), or an error saying it is missing.
    static func find(_ name: String) throws -> URL {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        let directories = path.split(separator: ":").map(String.init) + ["/usr/bin", "/bin", "/usr/local/bin"]
        for directory in directories {
            let candidate = URL(fileURLWithPath: directory).appendingPathComponent(name)
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
        }
        throw CLIError(description: "`\(name)` is not installed (looked on PATH: \(path)); this test needs it")
    }

    /// Runs `name arguments…` to completion, killing it (SIGKILL) after `timeout`.
    static func run(_ name: String, _ arguments: [String], timeout: Duration = .seconds(30)) async throws
        -> ToolResult
    {
        let executable = try find(name)
        let scratch = FileManager.default.temporaryDirectory
            .appendingPathComponent("stallmon-tool-output-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        let stdoutURL = scratch.appendingPathComponent("stdout")
        let stderrURL = scratch.appendingPathComponent("stderr")
        _ = FileManager.default.createFile(atPath: stdoutURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: stderrURL.path, contents: nil)
        let stdoutHandle = try FileHandle(forWritingTo: stdoutURL)
        let stderrHandle = try FileHandle(forWritingTo: stderrURL)
        defer {
            try? stdoutHandle.close()
            try? stderrHandle.close()
        }
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = stdoutHandle
        process.standardError = stderrHandle
        process.currentDirectoryURL = scratch
        try process.run()
        let deadline = ContinuousClock.now.advanced(by: timeout)
        var timedOut = false
        while process.isRunning {
            if ContinuousClock.now >= deadline {
                timedOut = true
                kill(process.processIdentifier, SIGKILL)
                let grace = ContinuousClock.now.advanced(by: .seconds(5))
                while process.isRunning && ContinuousClock.now < grace { usleep(5_000) }
                break
            }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return ToolResult(command: [name] + arguments, status: process.isRunning ? -1 : process.terminationStatus,
                          timedOut: timedOut,
                          stdout: (try? String(contentsOf: stdoutURL, encoding: .utf8)) ?? "",
                          stderr: (try? String(contentsOf: stderrURL, encoding: .utf8)) ?? "")
    }
}

/// One `stallmon demo` run into a fresh directory, and the reports it wrote.
struct DemoRun {
    let directory: String
    let result: CLIResult
    /// Path → report, for every stall-*.json written.
    let reports: [String: StallReport]

    /// Runs `stallmon demo --report-dir <parent>/<name> arguments…` and reads its reports.
    static func run(in parent: TemporaryDirectory, name: String, _ arguments: [String]) async throws -> DemoRun {
        let directory = parent.path(name)
        let result = try await CLI.run(["demo", "--report-dir", directory] + arguments,
                                       workingDirectory: parent.url, timeout: .seconds(60))
        var reports: [String: StallReport] = [:]
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        for file in names where file.hasPrefix("stall-") && file.hasSuffix(".json") {
            let path = directory + "/" + file
            reports[path] = try ReportReader.read(path)
        }
        return DemoRun(directory: directory, result: result, reports: reports)
    }

    /// The reports whose top in-app frame is in `function`, by path.
    func reports(topIn function: String) -> [(path: String, report: StallReport)] {
        reports.filter { $0.value.topFrame?.symbol.contains(function) == true }
            .map { (path: $0.key, report: $0.value) }.sorted { $0.path < $1.path }
    }
}
