import Foundation
@testable import Stallmon
@testable import StallmonReport
import StallmonTestSupport
import Testing

/// What one run of the `stallmon` executable produced.
struct CLIResult: Sendable, CustomStringConvertible {
    var arguments: [String]
    /// Exit status, or the signal number when `signaled`.
    var status: Int32
    var signaled: Bool
    var timedOut: Bool
    var stdout: String
    var stderr: String

    /// Non-empty lines of standard error.
    var stderrLines: [String] { stderr.split(separator: "\n").map(String.init) }
    /// Non-empty lines of standard output.
    var stdoutLines: [String] { stdout.split(separator: "\n").map(String.init) }

    var description: String {
        "stallmon \(arguments.joined(separator: " ")) → status \(status)\(signaled ? " (signal)" : "")"
            + "\(timedOut ? " TIMED OUT" : "")\n--- stdout ---\n\(stdout)\n--- stderr ---\n\(stderr)"
    }
}

struct CLIError: Error, CustomStringConvertible {
    let description: String
}

/// Finds and runs the `stallmon` executable built next to the test bundle.
enum CLI {
    /// Runs `stallmon arguments…` to completion (or until `timeout`, when it is killed) and returns its status and
    /// output. Output goes through files, not pipes, so a chatty process can never block on a full pipe.
    static func run(_ arguments: [String], environment overrides: [String: String] = [:],
                    workingDirectory: URL? = nil, timeout: Duration = .seconds(30)) async throws -> CLIResult
    {
        let running = try RunningCLI(arguments, environment: overrides, workingDirectory: workingDirectory)
        defer { running.cleanUp() }
        let finished = await running.waitForExit(timeout: timeout)
        if !finished { running.terminate() }
        return running.result(timedOut: !finished)
    }
}

/// A `stallmon` process started in the background (for `tail --follow`), with its output in temporary files.
final class RunningCLI {
    let arguments: [String]
    let process = Process()
    private let outputDirectory: URL
    private let stdoutURL: URL
    private let stderrURL: URL
    private let stdoutHandle: FileHandle
    private let stderrHandle: FileHandle

    init(_ arguments: [String], environment overrides: [String: String] = [:], workingDirectory: URL? = nil) throws {
        self.arguments = arguments
        outputDirectory = FileManager.default.temporaryDirectory
            .appendingPathComponent("stallmon-cli-output-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: outputDirectory, withIntermediateDirectories: true)
        stdoutURL = outputDirectory.appendingPathComponent("stdout")
        stderrURL = outputDirectory.appendingPathComponent("stderr")
        _ = FileManager.default.createFile(atPath: stdoutURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: stderrURL.path, contents: nil)
        stdoutHandle = try FileHandle(forWritingTo: stdoutURL)
        stderrHandle = try FileHandle(forWritingTo: stderrURL)
        process.executableURL = try StallmonExecutable.url()
        process.arguments = arguments
        process.environment = StallmonExecutable.environment(overrides)
        process.currentDirectoryURL = workingDirectory ?? outputDirectory
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = stdoutHandle
        process.standardError = stderrHandle
        try process.run()
    }

    /// Standard output so far.
    var stdout: String { (try? String(contentsOf: stdoutURL, encoding: .utf8)) ?? "" }
    /// Standard error so far.
    var stderr: String { (try? String(contentsOf: stderrURL, encoding: .utf8)) ?? "" }

    /// Waits for the process to exit; false on timeout.
    func waitForExit(timeout: Duration) async -> Bool {
        let deadline = ContinuousClock.now.advanced(by: timeout)
        while process.isRunning {
            if ContinuousClock.now >= deadline { return false }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return true
    }

    /// Waits until standard output contains `text`; false on timeout.
    func waitForStdout(containing text: String, timeout: Duration = .seconds(8)) async -> Bool {
        let deadline = ContinuousClock.now.advanced(by: timeout)
        while !stdout.contains(text) {
            if ContinuousClock.now >= deadline || !process.isRunning { return stdout.contains(text) }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return true
    }

    /// Kills the process (SIGKILL) and waits for it to exit. Not SIGTERM: a child started by Foundation's `Process`
    /// from a Swift concurrency thread inherits that thread's signal mask, in which SIGTERM is blocked.
    func terminate() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        let deadline = ContinuousClock.now.advanced(by: .seconds(5))
        while process.isRunning && ContinuousClock.now < deadline { usleep(5_000) }
    }

    func result(timedOut: Bool) -> CLIResult {
        let signaled = !process.isRunning && process.terminationReason == .uncaughtSignal
        return CLIResult(arguments: arguments, status: process.isRunning ? -1 : process.terminationStatus,
                         signaled: signaled, timedOut: timedOut, stdout: stdout, stderr: stderr)
    }

    /// Kills the process if it still runs and removes its output files.
    func cleanUp() {
        terminate()
        try? stdoutHandle.close()
        try? stderrHandle.close()
        try? FileManager.default.removeItem(at: outputDirectory)
    }

    deinit {
        cleanUp()
    }
}
