import Foundation
import Testing
@testable import StallmonReport
import StallmonTestSupport

/// `StallSummary`, in process: nearest-rank percentiles, grouping, and the JSON contract.
@Suite("StallSummary")
struct StallSummaryTests {
    static func entries(_ durations: [Double], symbol: (Int) -> String? = { _ in "A.a()" })
        -> [(path: String, report: StallReport)]
    {
        durations.enumerated().map { index, duration in
            ("/r/stall-\(index).json",
             Fixture.report(id: "id-\(index)", durationMs: duration, topSymbol: symbol(index),
                            start: Fixture.start(index)))
        }
    }

    @Test("nearest-rank percentiles match an integer computation",
          arguments: [1, 2, 3, 7, 10, 11, 20, 99, 100, 101, 250])
    func percentiles(count: Int) {
        // Distinct, unsorted durations.
        let durations = (0..<count).map { Double(($0 * 37) % count) * 10 + 100 }
        let summary = StallSummary(directory: "/r", reports: Self.entries(durations), unreadable: 0)
        let stats = summary.durationMs!
        #expect(stats.p50 == Fixture.nearestRank(durations, percent: 50))
        #expect(stats.p90 == Fixture.nearestRank(durations, percent: 90))
        #expect(stats.p99 == Fixture.nearestRank(durations, percent: 99))
        #expect(stats.max == durations.max())
        #expect(stats.total == durations.reduce(0, +))
        #expect(summary.groups.first?.p50Ms == stats.p50)
    }

    @Test("known values: 1…10 gives p50 5, p90 9, p99 10; 1…100 gives 50, 90, 99")
    func knownPercentiles() {
        let ten = StallSummary(directory: "/r", reports: Self.entries((1...10).map(Double.init).reversed()),
                               unreadable: 0).durationMs!
        #expect((ten.p50, ten.p90, ten.p99, ten.max) == (5, 9, 10, 10))
        let hundred = StallSummary(directory: "/r", reports: Self.entries((1...100).map(Double.init)),
                                   unreadable: 0).durationMs!
        #expect((hundred.p50, hundred.p90, hundred.p99, hundred.max) == (50, 90, 99, 100))
    }

    @Test("groups say what their stalls waited on most, without addresses, thread ids or ephemeral ports")
    func waitingOn() throws {
        var entries = Self.entries([300, 250, 200, 150])
        func lock(_ tid: Int32, _ address: String) -> StallReport.WaitingOn {
            .init(kind: "lock", syscall: "futex", target: "pthread mutex \(address) held by thread \(tid) \"ledger\"",
                  holderThread: tid, holderName: "ledger", samples: 5,
                  holderTopFrame: .init(symbol: "App.Ledger.flush()"))
        }
        entries[0].report.waitingOn = [lock(11, "0x10")]
        entries[1].report.waitingOn = [lock(12, "0x20")]
        entries[2].report.waitingOn = [.init(kind: "socket", syscall: "read",
                                             target: "TCP 127.0.0.1:39514 → 10.0.0.5:5432", samples: 3)]
        let summary = StallSummary(directory: "/r", reports: entries, unreadable: 0)
        let group = try #require(summary.groups.first)
        #expect(group.count == 4)
        #expect(group.waitingOn == "pthread mutex held by \"ledger\" running App.Ledger.flush()")
        #expect(group.waitingOnCount == 2)
        #expect(entries[2].report.waitingOn?.first?.groupDescription == "TCP → 10.0.0.5:5432")
        #expect(StallReport.WaitingOn(kind: "lock", syscall: "futex", target: "futex 0x1 (owner unknown: …)",
                                      samples: 1).groupDescription == "futex (owner unknown)")
        #expect(StallReport.WaitingOn(kind: "file", syscall: "fsync", target: "/var/lib/x", samples: 1)
                    .groupDescription == "fsync /var/lib/x")
        // The digest `stallmon report` reads carries it, so the fast path groups the same way.
        let data = try JSONEncoder().encode(entries[0].report)
        let digest = try ReportReader.decodeDigest(data, path: "/r/x.json")
        #expect(digest.waitingOn == entries[0].report.waitingOn)
    }

    @Test("no reports: no durations, no groups")
    func empty() {
        let summary = StallSummary(directory: "/r", reports: [], unreadable: 2)
        #expect(summary.stalls == 0)
        #expect(summary.unreadable == 2)
        #expect(summary.durationMs == nil)
        #expect(summary.firstStart == nil)
        #expect(summary.groups.isEmpty)
    }

    @Test("grouping: by top frame symbol, missing top frame in its own group, most stalls first")
    func grouping() {
        let symbols: [String?] = ["A.a()", nil, "B.b()", "A.a()", nil, "A.a()"]
        let durations: [Double] = [100, 500, 900, 300, 200, 200]
        let summary = StallSummary(directory: "/r", reports: Self.entries(durations) { symbols[$0] }, unreadable: 0)
        #expect(summary.groups.map(\.topFrame) == ["A.a()", StallSummary.noInAppFrame, "B.b()"])
        #expect(summary.groups.map(\.count) == [3, 2, 1])
        #expect(summary.groups[0].reportIds == ["id-0", "id-3", "id-5"])
        #expect(summary.groups[0].example == "/r/stall-3.json")
        #expect(summary.groups[0].totalMs == 600)
        #expect(summary.groups[0].p50Ms == 200)
        #expect(summary.groups[1].example == "/r/stall-1.json")
        #expect(summary.groups[1].file == nil)
        #expect(summary.groups[2].maxMs == 900)
    }

    @Test("the JSON form has the documented keys (stallmon.summary/1)")
    func jsonKeys() throws {
        let summary = StallSummary(directory: "/r", reports: Self.entries([150, 250]), unreadable: 1)
        let object = try #require(try JSONSerialization.jsonObject(with: JSONEncoder().encode(summary))
            as? [String: Any])
        #expect(Set(object.keys) == ["schema", "directory", "stalls", "ongoing", "unreadable", "durationMs",
                                     "firstStart", "lastStart", "loops", "classes", "suppressed", "histogram", "groups"])
        #expect(object["schema"] as? String == "stallmon.summary/1")
        let durations = try #require(object["durationMs"] as? [String: Any])
        #expect(Set(durations.keys) == ["p50", "p90", "p99", "max", "total"])
        let group = try #require((object["groups"] as? [[String: Any]])?.first)
        // `signature` and `class` are omitted when the reports carry none (as these fixtures).
        #expect(Set(group.keys) == ["topFrame", "file", "line", "count", "totalMs", "p50Ms", "maxMs", "loops",
                                    "reportIds", "example", "suppressed"])
        let buckets = try #require(object["histogram"] as? [[String: Any]])
        #expect(buckets.count == StallSummary.bucketEdges.count)
    }
}
