import Foundation
@testable import Stallmon
@testable import StallmonReport
import StallmonTestSupport
import Testing

/// Invalid arguments, configuration files and environment variables: exit 64 with a message naming the culprit.
@Suite("stallmon argument and configuration validation")
struct ArgumentValidationTests {
    static let usage: Int32 = 64

    @Test("demo --threshold-ms 0 (or negative) is refused, naming the value")
    func demoThreshold() async throws {
        try await withTemporaryDirectory { directory in
            let reports = directory.path("reports")
            for value in ["0", "-5"] {
                let result = try await CLI.run(["demo", "--threshold-ms=\(value)", "--report-dir", reports,
                                                "--seconds", "1"])
                #expect(result.status == Self.usage, "\(result)")
                #expect(result.stdout.isEmpty, "\(result)")
                #expect(result.stderr.contains("--threshold-ms"), "\(result)")
                #expect(result.stderr.contains("got \(value)"), "the value is named: \(result)")
            }
            #expect(!FileManager.default.fileExists(atPath: reports), "nothing is written")
        }
    }

    @Test("demo --seconds out of range is refused", arguments: ["0", "-1", "3601"])
    func demoSeconds(value: String) async throws {
        let result = try await CLI.run(["demo", "--seconds=\(value)", "--report-dir", "unused"])
        #expect(result.status == Self.usage, "\(result)")
        #expect(result.stderr.contains("--seconds must be in (0, 3600]"), "\(result)")
    }

    @Test("report --top 0 is refused")
    func reportTop() async throws {
        try await withTemporaryDirectory { directory in
            let result = try await CLI.run(["report", directory.path, "--top", "0"])
            #expect(result.status == Self.usage, "\(result)")
            #expect(result.stdout.isEmpty, "\(result)")
            #expect(result.stderr.contains("--top"), "\(result)")
        }
    }

    @Test("unknown --format values are refused", arguments: [["report", "."], ["show", "x.json"], ["tail", "x"]])
    func badFormat(command: [String]) async throws {
        let result = try await CLI.run(command + ["--format", "xml"])
        #expect(result.status == Self.usage, "\(result)")
        #expect(result.stderr.contains("xml"), "\(result)")
    }

    @Test("an unknown subcommand is refused")
    func unknownSubcommand() async throws {
        let result = try await CLI.run(["frobnicate"])
        #expect(result.status == Self.usage, "\(result)")
        #expect(result.stderr.contains("frobnicate"), "\(result)")
    }

    @Test("an unknown key in the --config file is refused, naming the line and the nearest key, not echoing it",
          arguments: [["demo", "--seconds", "1"], ["report"], ["tail"]])
    func unknownConfigKey(command: [String]) async throws {
        try await withTemporaryDirectory { directory in
            let config = try directory.write("stallmon.conf", "# settings\nthreshold_ms = 50\nmax_sampels = 1\n")
            let result = try await CLI.run(command + ["--config", config],
                                           workingDirectory: directory.url)
            #expect(result.status == Self.usage, "\(result)")
            #expect(result.stdout.isEmpty, "\(result)")
            #expect(result.stderr.contains("unknown config key"), "\(result)")
            #expect(result.stderr.contains("did you mean `max_samples`?"), "\(result)")
            #expect(!result.stderr.contains("max_sampels"), "the line is not echoed: \(result)")
            #expect(result.stderr.contains("\(config):3"), "file and line: \(result)")
            #expect(!FileManager.default.fileExists(atPath: directory.path("stallmon-reports")))
        }
    }

    /// Giving DIR or LOG makes the configuration unnecessary, but a bad one is still an error (it was ignored).
    @Test("a bad --config, STALLMON_CONFIG or STALLMON_* is refused even when DIR or LOG is given",
          arguments: ["report", "tail", "upload"])
    func badConfigurationWithExplicitTarget(command: String) async throws {
        try await withTemporaryDirectory { directory in
            let target = command == "tail" ? try directory.write("events.jsonl", "") : directory.path
            let bad = try directory.write("bad.conf", "bogus_key = 1\n")
            let extra = command == "upload" ? ["--endpoint", "http://127.0.0.1:9", "--deadline", "1"] : []
            for (arguments, environment) in [
                ([command, target, "--config", bad] + extra, [String: String]()),
                ([command, target] + extra, ["STALLMON_CONFIG": bad]),
                ([command, target] + extra, ["STALLMON_TRESHOLD_MS": "50"]),
            ] {
                let result = try await CLI.run(arguments, environment: environment, workingDirectory: directory.url)
                #expect(result.status == Self.usage, "\(result)")
                #expect(result.stderr.contains("unknown config key") || result.stderr.contains("STALLMON_TRESHOLD_MS"),
                        "\(result)")
            }
        }
    }

    /// Secrets never reach an error message: a token line without `=`, a header value, a control character.
    @Test("errors about the token or headers never show their values")
    func secretsAreNotEchoed() async throws {
        try await withTemporaryDirectory { directory in
            let cases: [(String, [String: String])] = [
                ("upload_token secret-XYZ\n", [:]),
                ("upload_headers X-Api-Key secret-XYZ\n", [:]),
                ("secret-XYZ\n", [:]),
                ("upload_headers = X-Api-Key: secret-XYZ\u{01}\n", [:]),
                ("", ["STALLMON_UPLOAD_TOKEN": "secret-XYZ\u{01}"]),
                ("", ["STALLMON_UPLOAD_TOKEN": "secret-XYZ\nInjected: 1"]),
                ("upload_endpoint = http://user:secret-XYZ@[bad\n", [:]),
            ]
            for (index, (text, environment)) in cases.enumerated() {
                let config = try directory.write("c\(index).conf", text)
                let result = try await CLI.run(["report", directory.path, "--config", config],
                                               environment: environment, workingDirectory: directory.url)
                #expect(result.status == Self.usage, "case \(index): \(result)")
                #expect(!result.stderr.contains("secret-XYZ"), "case \(index) leaks the secret: \(result.stderr)")
                #expect(result.stderr.contains(config) || result.stderr.contains("STALLMON_UPLOAD_TOKEN"),
                        "case \(index) names where: \(result.stderr)")
            }
        }
    }

    @Test("the config file named by STALLMON_CONFIG is checked too")
    func unknownKeyThroughConfigVariable() async throws {
        try await withTemporaryDirectory { directory in
            let config = try directory.write("stallmon.conf", "bogus_key = 1\n")
            let result = try await CLI.run(["report"], environment: ["STALLMON_CONFIG": config],
                                           workingDirectory: directory.url)
            #expect(result.status == Self.usage, "\(result)")
            #expect(result.stderr.contains("\(config):1: unknown config key"), "\(result)")
        }
    }

    @Test("a nonsensical value in the config file names key, value and line")
    func badConfigValue() async throws {
        try await withTemporaryDirectory { directory in
            let config = try directory.write("stallmon.conf", "threshold_ms = fast\n")
            let result = try await CLI.run(["demo", "--config", config, "--seconds", "1"],
                                           workingDirectory: directory.url)
            #expect(result.status == Self.usage, "\(result)")
            #expect(result.stderr.contains("threshold_ms"), "\(result)")
            #expect(result.stderr.contains("fast"), "\(result)")
            #expect(result.stderr.contains("\(config):1"), "\(result)")
        }
    }

    @Test("a missing config file is an error naming it")
    func missingConfigFile() async throws {
        try await withTemporaryDirectory { directory in
            let config = directory.path("nope.conf")
            let result = try await CLI.run(["report", "--config", config], workingDirectory: directory.url)
            #expect(result.status == Self.usage, "\(result)")
            #expect(result.stderr.contains(config), "\(result)")
        }
    }

    @Test("STALLMON_THRESHOLD_MS=abc is refused, naming the variable",
          arguments: [["demo", "--seconds", "1"], ["report"]])
    func badEnvironmentValue(command: [String]) async throws {
        try await withTemporaryDirectory { directory in
            let result = try await CLI.run(command, environment: ["STALLMON_THRESHOLD_MS": "abc"],
                                           workingDirectory: directory.url)
            #expect(result.status == Self.usage, "\(result)")
            #expect(result.stdout.isEmpty, "\(result)")
            #expect(result.stderr.contains("STALLMON_THRESHOLD_MS"), "\(result)")
            #expect(result.stderr.contains("abc"), "\(result)")
            let leftovers = try FileManager.default.contentsOfDirectory(atPath: directory.path)
            #expect(leftovers.isEmpty, "nothing is written: \(leftovers)")
        }
    }

    @Test("an unknown STALLMON_ variable is refused, naming it")
    func unknownEnvironmentVariable() async throws {
        try await withTemporaryDirectory { directory in
            let result = try await CLI.run(["demo", "--seconds", "1"], environment: ["STALLMON_TRESHOLD_MS": "50"],
                                           workingDirectory: directory.url)
            #expect(result.status == Self.usage, "\(result)")
            #expect(result.stderr.contains("STALLMON_TRESHOLD_MS"), "\(result)")
        }
    }

    @Test("a config that contradicts itself is refused: sample interval not below the threshold")
    func inconsistentConfig() async throws {
        try await withTemporaryDirectory { directory in
            let result = try await CLI.run(["report"], environment: ["STALLMON_THRESHOLD_MS": "10",
                                                                     "STALLMON_SAMPLE_INTERVAL_MS": "20"],
                                           workingDirectory: directory.url)
            #expect(result.status == Self.usage, "\(result)")
            #expect(result.stderr.contains("sample_interval_ms"), "\(result)")
        }
    }
}

/// Extreme numbers on the command line: refused with exit 64 and the option named, never a trap (issue 41, item 1:
/// `stallmon upload --deadline 1e12` ended with "Double value cannot be converted to Int64").
@Suite("stallmon extreme option values")
struct ExtremeOptionTests {
    @Test("upload --deadline extremes are refused", arguments: ["1e12", "1e300", "inf", "-inf", "nan", "0", "-1"])
    func uploadDeadline(value: String) async throws {
        try await withTemporaryDirectory { directory in
            let result = try await CLI.run(["upload", directory.path, "--endpoint", "http://127.0.0.1:9",
                                            "--once", "--deadline=\(value)"])
            #expect(result.status == ArgumentValidationTests.usage, "\(result)")
            #expect(result.stderr.contains("--deadline"), "\(result)")
            #expect(!result.signaled, "\(result)")
        }
    }

    @Test("demo --threshold-ms extremes are refused", arguments: ["1e13", "1e300", "inf", "nan", "600001"])
    func demoThreshold(value: String) async throws {
        try await withTemporaryDirectory { directory in
            let result = try await CLI.run(["demo", "--threshold-ms=\(value)", "--report-dir",
                                            directory.path("reports"), "--seconds", "1"])
            #expect(result.status == ArgumentValidationTests.usage, "\(result)")
            #expect(result.stderr.contains("--threshold-ms"), "\(result)")
            #expect(!result.signaled, "\(result)")
        }
    }

    @Test("report, show and tail with extreme numbers are refused", arguments: [
        ["report", ".", "--top", "99999999999999999999"], ["report", ".", "--top", "-9223372036854775808"],
        ["tail", "x", "-n", "99999999999999999999"], ["report", ".", "--since", "inf"],
    ])
    func otherOptions(arguments: [String]) async throws {
        let result = try await CLI.run(arguments)
        #expect(!result.signaled, "\(result)")
        #expect(result.status == ArgumentValidationTests.usage || result.status == 1, "\(result)")
    }
}
