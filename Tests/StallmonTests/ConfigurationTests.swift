import Foundation
@testable import Stallmon
@testable import StallmonReport
import StallmonTestSupport
import Testing

struct ConfigurationTests {
    /// The initializer omitted six properties (issue 42, item 4): each can now be given there, with the documented
    /// default when it is not.
    @Test func everyPropertyCanBeGivenToTheInitializer() {
        let defaults = StallMonitorConfiguration()
        #expect(defaults.analysis.poolStatistics && defaults.hangs.action == .none && defaults.hangs.abortAfter == .seconds(60))
        #expect(defaults.hangs.systemdWatchdog == .auto && defaults.hangs.systemdHangAfter == .seconds(10) && defaults.hangs.controlSocket)
        let given = StallMonitorConfiguration(
            analysis: .init(poolStatistics: false), hangs: .init(action: .abort, abortAfter: .seconds(5), systemdWatchdog: .off, systemdHangAfter: .seconds(3), controlSocket: false))
        #expect(!given.analysis.poolStatistics && given.hangs.action == .abort && given.hangs.abortAfter == .seconds(5))
        #expect(given.hangs.systemdWatchdog == .off && given.hangs.systemdHangAfter == .seconds(3) && !given.hangs.controlSocket)
    }

    @Test func defaultsAreValid() throws {
        try StallMonitorConfiguration().validate()
    }

    @Test func theShippedSampleConfigParsesToTheDefaults() throws {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent(
            "../../config/stallmon.conf").standardized.path
        let loaded = try StallMonitorConfiguration.load(file: path, environment: [:])
        let expected = StallMonitorConfiguration()
        #expect(loaded == expected)
        let documented = try String(contentsOfFile: path, encoding: .utf8)
        for key in StallMonitorConfiguration.keys {
            #expect(documented.contains("\n\(key) ="), "config/stallmon.conf documents \(key)")
        }
    }

    @Test func theHangLimitsAreCheckedOnlyWhenActedOn() throws {
        // A threshold past the hang defaults (10 s, 60 s) is no error while nothing acts on them.
        let long = StallMonitorConfiguration(detection: .init(threshold: .seconds(90), interimAfter: .seconds(360)))
        try long.validate()
        var aborting = long
        aborting.hangs.action = .abort
        #expect(throws: ConfigurationError.self) { try aborting.validate() }
        aborting.hangs.abortAfter = .seconds(120)
        try aborting.validate()
    }

    @Test(arguments: [
        ("threshold_ms = 0", "threshold_ms"),
        ("threshold_ms = -5", "threshold_ms"),
        ("sample_interval_ms = 100", "sample_interval_ms"),
        ("signal = SIGUSR1", "SIGUSR1"),
        ("signal = SIGRTMIN+99", "SIGRTMIN+99"),
        ("max_frames = 1000", "max_frames"),
        ("threshold_ms = fast", "fast"),
        ("treshold_ms = 100", "unknown config key (the line is not shown: it may hold a secret); did you mean `threshold_ms`?"),
        ("threshold_ms 100", "expected `key = value`"),
        ("lock_holder_stacks = maybe", "maybe"),
    ])
    func badValuesAreRejectedNamingThem(line: String, mentioned: String) throws {
        let directory = makeTemporaryDirectory()
        let path = directory + "/bad.conf"
        try "# comment\n\(line)\n".write(toFile: path, atomically: true, encoding: .utf8)
        do {
            _ = try StallMonitorConfiguration.load(file: path, environment: [:])
            Issue.record("accepted \(line)")
        } catch {
            #expect(error.description.contains(mentioned), "\(error.description)")
            if !line.hasPrefix("sample") && !line.hasPrefix("max_frames") && !line.contains("SIGRTMIN+99")
                && !line.hasPrefix("threshold_ms = 0") && !line.hasPrefix("threshold_ms = -")
            {
                #expect(error.description.contains("bad.conf:2"), "names the line: \(error.description)")
            }
        }
    }

    @Test func environmentOverridesTheFile() throws {
        let directory = makeTemporaryDirectory()
        let path = directory + "/ok.conf"
        try "threshold_ms = 250\nreport_dir = /var/lib/x\n".write(toFile: path, atomically: true, encoding: .utf8)
        let loaded = try StallMonitorConfiguration.load(
            file: path, environment: ["STALLMON_THRESHOLD_MS": "40", "STALLMON_SAMPLE_INTERVAL_MS": "5", "PATH": "/bin"])
        #expect(loaded.detection.threshold == .milliseconds(40))
        #expect(loaded.detection.sampleInterval == .milliseconds(5))
        #expect(loaded.reports.directory == "/var/lib/x")
        #expect(loaded.reports.resolvedEventLogPath == "/var/lib/x/events.jsonl")
        #expect(loaded.analysis.lockHolderStacks)
        #expect(try !StallMonitorConfiguration.load(file: nil, environment: ["STALLMON_LOCK_HOLDER_STACKS": "off"])
                    .analysis.lockHolderStacks)
    }

    @Test func theDefaultReportDirectoryIsAbsoluteAndFollowsSystemd() {
        #expect(StallMonitorConfiguration.defaultReportDirectory(stateDirectory: "/var/lib/myservice")
                == "/var/lib/myservice/stallmon")
        #expect(StallMonitorConfiguration.defaultReportDirectory(stateDirectory: "/var/lib/a:/var/lib/b")
                == "/var/lib/a/stallmon", "the first of several")
        #expect(StallMonitorConfiguration.defaultReportDirectory(stateDirectory: nil) == "/var/tmp/stallmon-\(getuid())")
        #expect(StallMonitorConfiguration.defaultReportDirectory(stateDirectory: "relative")
                == "/var/tmp/stallmon-\(getuid())", "only an absolute state directory counts")
    }

    @Test func unknownEnvironmentVariablesAreRejected() {
        #expect(throws: ConfigurationError.self) {
            _ = try StallMonitorConfiguration.load(file: nil, environment: ["STALLMON_THRESHOLD": "40"])
        }
    }

    @Test func signalsParse() throws {
        #expect(try SamplingSignal(parsing: "SIGRTMIN+5") == SamplingSignal(offsetFromRTMin: 5))
        #expect(try SamplingSignal(parsing: "sigrtmin") == SamplingSignal(offsetFromRTMin: 0))
        let number = try SamplingSignal(parsing: "SIGRTMIN+2").resolve()
        #expect(try SamplingSignal(parsing: String(number)) == SamplingSignal(offsetFromRTMin: 2))
    }

    @Test func theMonitorRefusesAnInvalidConfiguration() throws {
        let loop = try Looper(name: "x")
        #expect(throws: StallMonitorError.self) {
            _ = try LooperStallMonitor(loop: loop, configuration: .init(detection: .init(threshold: .zero)))
        }
    }
}

import StallmonLoop

/// Extreme values for every key, from the environment: each is refused with an error naming the key, or accepted as a
/// configuration that validates and whose durations convert to the watchdog's nanoseconds without a trap (issue 41,
/// item 1: nothing from outside may trap).
struct ConfigurationExtremeValueTests {
    static let extremes = [
        "99999999999999999999", "-99999999999999999999", "9223372036854775807", "-9223372036854775808",
        "999999999999", "1e308", "-1e308", "inf", "-inf", "nan", "0x10", "", " ", "1e-320", "-0", "٣", "1_000",
    ]

    @Test func everyKeyTakesEveryExtremeValueWithoutATrap() {
        var accepted = 0
        var refused = 0
        for key in StallMonitorConfiguration.table {
            for value in Self.extremes {
                let variable = "STALLMON_" + key.name.uppercased()
                do {
                    let loaded = try StallMonitorConfiguration.load(file: nil, environment: [variable: value])
                    try loaded.validate()
                    // What the monitor and the uploader derive from the durations, as they do (a trapping conversion
                    // of what validation keeps positive: a value it let through negative ends this test).
                    for duration in [loaded.detection.threshold, loaded.detection.sampleInterval, loaded.detection.interimAfter,
                                     loaded.detection.captureTimeout, loaded.upload.batchMaxAge, loaded.upload.requestTimeout,
                                     loaded.upload.backoffBase, loaded.upload.backoffMax, loaded.upload.retryAfterCap,
                                     loaded.reports.maxAge, loaded.upload.spoolMaxAge, loaded.upload.rejectedMaxAge] {
                        _ = UInt64(duration.nanosecondsClamped)
                    }
                    if loaded.hangs.action == .abort { _ = UInt64(loaded.hangs.abortAfter.nanosecondsClamped) }
                    accepted += 1
                } catch {
                    #expect(error.description.contains(key.name) || error.description.contains(variable),
                            "\(variable)=\(value): \(error.description)")
                    refused += 1
                }
            }
        }
        #expect(refused > 0 && accepted > 0, "both outcomes seen: \(refused) refused, \(accepted) accepted")
    }
}
