@testable import Stallmon
@testable import StallmonReport
import StallmonTestSupport
import Testing

struct StallAggregationTests {
    /// A frame table where index i is function names[i]; `shift` moves every address, as ASLR would.
    func table(_ names: [String], inApp: Set<String> = [], shift: UInt = 0) -> [StallReport.Frame] {
        names.enumerated().map { index, name in
            StallReport.Frame(address: hex(0x1000 + UInt(index) * 16 + shift), image: 0, module: "/app", buildId: nil,
                              offset: hex(0x1000 + UInt(index) * 16), symbol: name, symbolOffset: 4, file: nil,
                              line: nil, inApp: inApp.contains(name))
        }
    }

    @Test func theHottestStackIsThePathMostSamplesShare() {
        // Stacks innermost first. main → run → handle → {parse (7), encode (3)}; parse → {a (4), b (3)}.
        let frames = table(["main", "run", "handle", "parse", "encode", "a", "b"])
        var stacks: [[Int]] = []
        stacks += Array(repeating: [5, 3, 2, 1, 0], count: 4)
        stacks += Array(repeating: [6, 3, 2, 1, 0], count: 3)
        stacks += Array(repeating: [4, 2, 1, 0], count: 3)
        let tree = StallAggregation.callTree(stacks, frames: frames)
        #expect(tree.count == 1 && tree[0].samples == 10)
        let hottest = StallAggregation.hottestStack(tree, total: stacks.count)
        #expect(hottest == HottestStack(frames: [3, 2, 1, 0], samples: 7, of: 10),
                "stops at parse: below it no child holds a majority")
    }

    @Test func frameAddressesWithinOneFunctionMergeIntoOneNode() {
        // A spinning function sampled at different instructions is still one node.
        var frames = table(["main", "spin"])
        frames.append(StallReport.Frame(address: "0x9999", image: 0, module: "/app", buildId: nil, offset: "0x9999",
                                        symbol: "spin", symbolOffset: 40, file: nil, line: nil, inApp: false))
        let tree = StallAggregation.callTree([[1, 0], [2, 0], [1, 0]], frames: frames)
        #expect(tree[0].children.count == 1)
        #expect(tree[0].children[0].samples == 3)
        #expect(tree[0].children[0].frame == 1, "the most sampled frame represents the function")
    }

    @Test func theTopFrameTakesTheMostCommonKnownLineOfItsFunction() {
        // `spin` sampled at three instructions: the most sampled one is compiler-generated (DWARF line 0: the file,
        // no line), the others at lines 12 (3 samples) and 14 (2).
        func spin(_ address: UInt, line: Int?) -> StallReport.Frame {
            StallReport.Frame(address: hex(address), image: 0, module: "/app", buildId: nil, offset: hex(address),
                              symbol: "App.spin()", symbolOffset: 4, file: "/src/Spin.swift", line: line, inApp: true)
        }
        let frames = table(["main"], inApp: ["main"]) + [spin(0x2000, line: nil), spin(0x2010, line: 12),
                                                         spin(0x2020, line: 14)]
        var samples: [StallReport.Sample] = []
        for (index, count) in [(1, 5), (2, 3), (3, 2)] {
            for _ in 0..<count {
                samples.append(.init(offsetMs: 0, status: .ok, frames: [index, 0], truncated: false, label: nil))
            }
        }
        let top = StallAggregation.analyze(frames: frames, samples: samples).topFrame
        #expect(top?.symbol == "App.spin()")
        #expect(top?.file == "/src/Spin.swift" && top?.line == 12, "\(String(describing: top))")
        #expect(top?.displayName == "App.spin() (Spin.swift:12)")

        // No known line at all: the file is still given.
        let lineless = table(["main"], inApp: ["main"]) + [spin(0x2000, line: nil)]
        let only = StallAggregation.analyze(frames: lineless, samples: [.init(offsetMs: 0, status: .ok, frames: [1, 0],
                                                                               truncated: false, label: nil)]).topFrame
        #expect(only?.file == "/src/Spin.swift" && only?.line == nil)
        #expect(only?.displayName == "App.spin() (Spin.swift:?)")
    }

    @Test func signaturesIgnoreAddressesAndFollowInAppFunctions() {
        let names = ["libc_read", "App.fetch()", "App.handle()", "main"]
        let one = table(names, inApp: ["App.fetch()", "App.handle()", "main"])
        let other = table(names, inApp: ["App.fetch()", "App.handle()", "main"], shift: 0x7f00_0000)
        #expect(StallAggregation.signature([0, 1, 2, 3], frames: one)
            == StallAggregation.signature([0, 1, 2, 3], frames: other))
        let different = table(["libc_read", "App.other()", "App.handle()", "main"],
                              inApp: ["App.other()", "App.handle()", "main"])
        #expect(StallAggregation.signature([0, 1, 2, 3], frames: one)
            != StallAggregation.signature([0, 1, 2, 3], frames: different))
        #expect(StallAggregation.signature([0, 1, 2, 3], frames: one).count == 16)
    }

    /// An async function's partial functions are numbered by its suspension points: an `await` added elsewhere in the
    /// function renumbers them, and must not make a new kind of stall; another function must.
    @Test func signaturesIgnoreThePartialFunctionsNumber() {
        let inApp = ["App.read()", "(3) await resume partial function for App.load()",
                     "(2) suspend resume partial function for App.handle()"]
        let before = table(["libc_read"] + inApp, inApp: Set(inApp))
        let renumbered = ["App.read()", "(4) await resume partial function for App.load()",
                          "(2) suspend resume partial function for App.handle()"]
        let after = table(["libc_read"] + renumbered, inApp: Set(renumbered))
        #expect(StallAggregation.signature([0, 1, 2, 3], frames: before)
            == StallAggregation.signature([0, 1, 2, 3], frames: after))
        let elsewhere = ["App.read()", "(3) await resume partial function for App.save()",
                         "(2) suspend resume partial function for App.handle()"]
        let other = table(["libc_read"] + elsewhere, inApp: Set(elsewhere))
        #expect(StallAggregation.signature([0, 1, 2, 3], frames: before)
            != StallAggregation.signature([0, 1, 2, 3], frames: other))
        #expect(StallReport.Frame.withoutPartialFunctionPrefix("(12) suspend resume partial function for f()") == "f()")
        let plain = "(not a partial function) g()"
        #expect(StallReport.Frame.withoutPartialFunctionPrefix(plain) == plain)
    }

    /// Idleness needs no symbols: a sample whose handler ran after the loop's own end of the iteration is idle even
    /// when its addresses name nothing (a stripped binary); one taken before the end is evidence.
    @Test func samplesAfterTheIterationsEndAreIdleWithoutSymbols() {
        let unknown: [UInt] = [0x10, 0x20, 0x30]  // addresses no image contains
        func sample(at time: UInt64) -> RawSample {
            RawSample(capturedAt: time, status: .ok, frames: unknown, truncated: false, pauseNanoseconds: 1000,
                      labelID: 0)
        }
        let snapshot = StallEvidence(id: "x", loopName: "main", threadID: 1, thresholdNanoseconds: 50_000_000,
                                     since: 1_000_000_000, sinceWall: 1_700_000_000_000_000_000,
                                     durationNanoseconds: 200_000_000, durationExact: true, ongoing: false,
                                     elapsedAtDetection: 50_000_000, labelID: 0,
                                     samples: [sample(at: 1_100_000_000), sample(at: 1_250_000_000)])
        let report = ReportBuilder(symbolicator: Symbolicator()).build(snapshot)
        #expect(report.samples.map { $0.idle == true } == [false, true])
        #expect(ReportBuilder.capturedAfterEnd(sample(at: 1_200_000_001), snapshot))
        var ongoing = snapshot
        ongoing.ongoing = true
        #expect(!ReportBuilder.capturedAfterEnd(sample(at: 1_250_000_000), ongoing), "no end yet")
    }

    @Test func samplesOfTheLoopWaitingInEpollAreNotEvidence() {
        let frames = table(["epoll_pwait2", "cstallmon_epoll_wait",
                            "StallmonLoop.Looper.(waitForEvents in _ABC)(timeoutNanoseconds: Swift.Int64) -> Swift.Int"])
        #expect(StallAggregation.isIdle([0, 1, 2], in: frames))
        #expect(!StallAggregation.isIdle([0], in: frames))
    }

    @Test func theRateLimiterAdmitsNPerWindowAndCountsTheRest() {
        var limiter = SignatureRateLimiter(limit: 2, window: 100)
        let decisions = [limiter.admit("a", now: 0), limiter.admit("a", now: 10), limiter.admit("a", now: 20),
                         limiter.admit("a", now: 30), limiter.admit("b", now: 30), limiter.admit("a", now: 101)]
        #expect(decisions.map(\.write) == [true, true, false, false, true, true])
        #expect(decisions[4].suppressedBefore == 0, "per signature")
        #expect(decisions[5].suppressedBefore == 2, "the window slid; two were suppressed meanwhile")
    }

    /// Old signatures are forgotten: before, each kept an array (emptied only on its own next admit), so the cleanup
    /// past 10,000 signatures removed nothing and every later admit filtered the whole map (issue 41, item 7).
    @Test func oldSignaturesAreForgotten() {
        var limiter = SignatureRateLimiter(limit: 1, window: 100)
        for index in 0..<10_000 { _ = limiter.admit("sig-\(index)", now: 0) }
        #expect(limiter.trackedSignatures == 10_000)
        _ = limiter.admit("late", now: 1_000)
        #expect(limiter.trackedSignatures == 1, "only the signature written within the window is left")
        // Live signatures are not pruned away.
        var live = SignatureRateLimiter(limit: 1, window: 1_000_000)
        for index in 0..<10_002 { _ = live.admit("sig-\(index)", now: UInt64(index)) }
        #expect(live.trackedSignatures == 10_002)
        #expect(live.admit("sig-5", now: 20_000).write == false, "still limited")
    }

    @Test func theClassIsTheLargestShareOfTheStall() {
        #expect(StallClassifier.classify(cpu: 90, runDelay: 5, wall: 100) == .cpu)
        #expect(StallClassifier.classify(cpu: 5, runDelay: 2, wall: 100) == .blocked)
        #expect(StallClassifier.classify(cpu: 10, runDelay: 70, wall: 100) == .starved)
        #expect(StallClassifier.classify(cpu: 0, runDelay: 0, wall: 0) == .unknown)
    }
}
