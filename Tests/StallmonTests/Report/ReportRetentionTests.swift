import Foundation
@testable import Stallmon
import StallmonLoop
@testable import StallmonReport
import StallmonTestSupport
import Testing

@Suite(.serialized)
struct ReportRetentionTests {
    typealias Entry = ReportRetention.Entry
    static let hour: UInt64 = 3_600_000_000_000

    @Test func theOldestGoFirstByCountBytesAndAgeButNeverAPendingOne() {
        let now = 100 * Self.hour
        let entries = (0..<6).map { index in
            Entry(name: "stall-\(index).json", bytes: 100, modified: now - UInt64(6 - index) * Self.hour,
                  queued: index == 1)  // #1 is still queued for upload (linked in the spool)
        }
        let byCount = ReportRetention.entriesToRemove(entries, limits: .init(maxCount: 3, maxBytes: 1 << 20,
                                                                             maxAgeNanoseconds: 100 * Self.hour),
                                                      now: now)
        #expect(byCount.map(\.name) == ["stall-0.json", "stall-2.json", "stall-3.json"],
                "oldest first, skipping the pending one, until three remain")
        let byBytes = ReportRetention.entriesToRemove(entries, limits: .init(maxCount: 100, maxBytes: 450,
                                                                             maxAgeNanoseconds: 100 * Self.hour),
                                                      now: now)
        #expect(byBytes.map(\.name) == ["stall-0.json", "stall-2.json"])
        let byAge = ReportRetention.entriesToRemove(entries, limits: .init(maxCount: 100, maxBytes: 1 << 20,
                                                                           maxAgeNanoseconds: 3 * Self.hour + 1),
                                                    now: now)
        #expect(byAge.map(\.name) == ["stall-0.json", "stall-2.json"], "older than 3 h, the pending one kept")
    }

    /// Anyone who can write the directory can set a report's times (`touch -d 1969-12-31`), and a sparse file can
    /// claim 2^63 - 1 bytes: listing and choosing what to remove never trap (issue 41, item 1: the writer thread ran
    /// this at every start, so one such file ended the service on every restart).
    @Test func extremeTimesAndSizesAreClearOutcomes() throws {
        let directory = makeTemporaryDirectory("retention-extremes")
        for (index, seconds) in [-1, Int(Int64.min / 2), Int(Int64.max / 2), 0].enumerated() {
            let path = directory + "/stall-2026-11-28T00-00-0\(index)Z-x.json"
            try Data("{}".utf8).write(to: URL(fileURLWithPath: path))
            var times = [timespec(tv_sec: seconds, tv_nsec: 0), timespec(tv_sec: seconds, tv_nsec: 999_999_999)]
            try #require(utimensat(AT_FDCWD, path, &times, 0) == 0 || seconds == Int(Int64.min / 2)
                         || seconds == Int(Int64.max / 2), "\(errno)")
        }
        let sparse = directory + "/stall-2026-11-28T00-00-09Z-sparse.json"
        try #require(FileManager.default.createFile(atPath: sparse, contents: nil))
        _ = truncate(sparse, off_t.max)  // refused by some file systems: the sum below is checked either way
        let entries = ReportRetention.list(directory)
        #expect(entries.count == 5)
        let huge = entries + [Entry(name: "x", bytes: Int.max, modified: .max, queued: false),
                              Entry(name: "y", bytes: Int.max, modified: 0, queued: false),
                              Entry(name: "z", bytes: -5, modified: 0, queued: false)]
        let removed = ReportRetention.entriesToRemove(huge, limits: .init(maxCount: 3, maxBytes: 1 << 20,
                                                                          maxAgeNanoseconds: Self.hour), now: .max)
        #expect(!removed.isEmpty)
    }

    /// A report a collector refused is linked in `spool/rejected/`: that second link kept it from retention forever
    /// (issue 41, item 4). Queued means linked in `spool/pending/`, as that very file.
    @Test func aReportOnlyRejectedIsNotQueued() throws {
        let directory = makeTemporaryDirectory("retention-rejected")
        try AtomicFile.createDirectory(directory + "/spool/pending")
        try AtomicFile.createDirectory(directory + "/spool/rejected")
        let names = ["stall-1-rejected.json", "stall-2-pending.json", "stall-3-replaced.json", "stall-4-alone.json"]
        for name in names { try AtomicFile.write(Array("{}".utf8), to: directory + "/" + name) }
        #expect(link(directory + "/stall-1-rejected.json", directory + "/spool/rejected/stall-1-rejected.json") == 0)
        #expect(link(directory + "/stall-2-pending.json", directory + "/spool/pending/stall-2-pending.json") == 0)
        // Pending under its name is another file (a newer report not yet published here): this one is not queued.
        #expect(link(directory + "/stall-3-replaced.json", directory + "/spool/rejected/stall-3-replaced.json") == 0)
        try AtomicFile.write(Array("{ }".utf8), to: directory + "/spool/pending/stall-3-replaced.json")
        let entries = ReportRetention.list(directory)
        #expect(entries.map(\.name) == names)
        #expect(entries.map(\.queued) == [false, true, false, false])
        let removed = ReportRetention.entriesToRemove(entries, limits: .init(maxCount: 2, maxBytes: 1 << 20,
                                                                             maxAgeNanoseconds: Self.hour),
                                                     now: WallClock.nowNanoseconds())
        #expect(removed.map(\.name) == ["stall-1-rejected.json", "stall-3-replaced.json"],
                "all but the pending one and the newest")
    }

    @Test func aMonitorKeepsItsDirectoryWithinTheLimitsAndKeepsPendingReports() throws {
        let directory = makeTemporaryDirectory()
        // Two old reports from an earlier run, one of them still queued for upload (a hard link in the spool).
        try AtomicFile.createDirectory(directory + "/spool/pending")
        for name in ["stall-20200101T000000.000Z-aaaaaaaa.json", "stall-20200101T000001.000Z-bbbbbbbb.json"] {
            try AtomicFile.write(Array("{}".utf8), to: directory + "/" + name)
            var times = [timespec(tv_sec: time(nil) - 30 * 24 * 3600, tv_nsec: 0),
                         timespec(tv_sec: time(nil) - 30 * 24 * 3600, tv_nsec: 0)]
            _ = utimensat(AT_FDCWD, directory + "/" + name, &times, 0)
        }
        #expect(link(directory + "/stall-20200101T000001.000Z-bbbbbbbb.json",
                     directory + "/spool/pending/stall-20200101T000001.000Z-bbbbbbbb.json") == 0)
        var configuration = StallMonitorConfiguration(detection: .init(threshold: .milliseconds(50)),
                                                      reports: .init(directory: directory))
        configuration.reports.maxCount = 2
        let loop = try Looper(name: "retention")
        let monitor = try LooperStallMonitor(loop: loop, configuration: configuration)
        monitor.start()
        postChainedSpins(loop, count: 3, milliseconds: 80, detected: { monitor.statistics.stallsDetected }, then: { loop.stop() })
        loop.run(for: .seconds(60))
        monitor.stop()
        let names = try FileManager.default.contentsOfDirectory(atPath: directory)
            .filter { $0.hasPrefix("stall-") }.sorted()
        #expect(!names.contains("stall-20200101T000000.000Z-aaaaaaaa.json"), "the old one went (age, count)")
        #expect(names.contains("stall-20200101T000001.000Z-bbbbbbbb.json"), "the pending one stays: \(names)")
        let fresh = names.filter { !$0.hasPrefix("stall-2020") }
        #expect(fresh.count == 1, "count 2: the pending old one and the newest of the three: \(names)")
        // Three spins, and any stall a loaded machine added: every report but the newest went, and the old one.
        #expect(monitor.statistics.reportsWritten >= 3)
        #expect(monitor.statistics.reportsRemovedByRetention == monitor.statistics.reportsWritten,
                "\(monitor.statistics)")
    }
}
