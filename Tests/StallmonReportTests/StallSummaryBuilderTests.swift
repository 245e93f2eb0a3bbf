import Foundation
import Testing
@testable import StallmonReport
import StallmonTestSupport

/// `StallSummary.Builder`: folded in any order and in any runs, the summary of reports in start order.
struct StallSummaryBuilderTests {
    /// Digests that tie on start, duration and wait counts, with and without signatures, classes, top frames, waits
    /// and kinds, so that every "first" and "longest" of a group is decided by order.
    static func digests() -> [(path: String, report: StallDigest)] {
        var random = SeededRandom(seed: 7)
        return (0..<120).map { index in
            let signature = random.chance(70) ? "sig-\(random.below(4))" : nil
            var report = GroupFixture.report(
                id: "id-\(index)", durationMs: Double(100 * random.between(1...4)),
                topSymbol: random.chance(20) ? nil : "Top.f\(random.below(3))()",
                start: Fixture.start(random.below(30)), loop: random.pick(["main", "io"]),
                stallClass: random.chance(30) ? nil : random.pick([.cpu, .blocked, .starved]),
                signature: signature, suppressedBefore: random.chance(20) ? random.below(3) : nil)
            if random.chance(40) {
                report.waitingOn = [.init(kind: "lock", syscall: "futex", target: "0x\(random.below(3))",
                                          samples: 1)]
            }
            report.kind = random.chance(10) ? "starvation" : nil
            return (String(format: "/r/stall-%03d.json", index), StallDigest(report))
        }
    }

    @Test func foldedInShuffledRunsAndMergedInAnyOrderItIsTheSummaryOfTheReportsInStartOrder() {
        let digests = Self.digests()
        let inStartOrder = ReportReader.sortedByStart(digests, start: \.start.wall)
        let expected = StallSummary(directory: "/r", digests: inStartOrder, unreadable: 2)

        var random = SeededRandom(seed: 11)
        var shuffled = Array(digests.enumerated())
        shuffled.shuffle(using: &random)
        var runs = [StallSummary.Builder](repeating: .init(), count: 4)
        for (index, entry) in shuffled {
            runs[random.below(runs.count)].add(entry.report, path: entry.path,
                                               order: .init(start: entry.report.start.wall, index: index))
        }
        var merged = StallSummary.Builder()
        for run in runs.shuffled(using: &random) { merged.merge(run) }
        let summary = merged.summary(directory: "/r", unreadable: 2)
        #expect(summary == expected)
        #expect(summary.groups.count > 4 && summary.groups.contains { $0.waitingOn != nil }, "a varied set")
    }

    @Test func groupsAlikeInCountAndTimeAreOrderedByTheirFirstStall() {
        let late = GroupFixture.report(id: "late", durationMs: 100, topSymbol: "A.a()", start: Fixture.start(9))
        let early = GroupFixture.report(id: "early", durationMs: 100, topSymbol: "B.b()", start: Fixture.start(1))
        for _ in 0..<5 {  // not a dictionary's order, which changes from run to run
            let summary = StallSummary(directory: "/r", digests: [("/r/a", StallDigest(early)),
                                                                  ("/r/b", StallDigest(late))], unreadable: 0)
            #expect(summary.groups.map(\.reportIds) == [["early"], ["late"]])
        }
    }
}
