import Foundation
import StallmonTestSupport
import Testing

/// "Durable files" (README): each report is written to a temporary file that is fsynced, renamed, and its directory
/// fsynced. A SIGKILL cannot expose a missing fsync (the page cache survives it), so the calls are counted, under
/// strace, in a real demo run (issue 41, item 8: no test held this).
@Suite("durable files: the fsyncs are made", .serialized)
struct DurableFilesTests {
    @Test("every report: its temporary file fsynced, then the report directory")
    func everyReportIsFsyncedWithItsDirectory() async throws {
        let strace = try #require(findTool("strace"), "strace (scripts/test.sh installs it)")
        try await withTemporaryDirectory { temporary in
            let reports = temporary.path("reports")
            let trace = temporary.path("trace")
            let output = temporary.path("output")
            let stallmon = try StallmonExecutable.url().path
            let status = try await offThePool {
                ChildProcess.run(strace, ["-f", "-y", "-qq", "-e", "trace=fsync,fdatasync", "-o", trace, stallmon,
                                          "demo", "--seconds", "4", "--stalls", "cpu,sleep", "--report-dir", reports],
                                 timeout: .seconds(120), environment: StallmonExecutable.environment(),
                                 outputPath: output)
            }
            let printed = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
            try #require(status == 0, "\(printed)")
            let names = try FileManager.default.contentsOfDirectory(atPath: reports)
                .filter { $0.hasPrefix("stall-") && $0.hasSuffix(".json") }
            try #require(!names.isEmpty, "the demo wrote reports: \(printed)")
            let lines = try String(contentsOfFile: trace, encoding: .utf8).split(separator: "\n")
            let synced = lines.filter { $0.contains("fsync(") || $0.contains("fdatasync(") }
                .filter { $0.contains("= 0") }
            // `fsync(7</…/reports/.tmp-stall-…>)`: a report's temporary file, by its final name.
            for name in names {
                #expect(synced.contains { $0.contains("/reports/.tmp-\(name)") }, "\(name) was fsynced before rename")
            }
            // `fsync(8</…/reports>)`: the directory, after each rename (at least once per report).
            let directorySyncs = synced.filter { $0.contains("\(reports)>)") }.count
            #expect(directorySyncs >= names.count, "\(directorySyncs) directory fsyncs for \(names.count) reports")
        }
    }
}
