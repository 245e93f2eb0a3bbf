@testable import StallmonProfiles
import StallmonReport
import StallmonTestSupport
import Testing

/// `StallStacks`: reports turned into a profile's tables and weighted samples, checked on hand-made reports whose
/// stacks are known (`Fixture.report`: 1 sample `[top, caller, main]` and 3 `[leaf, top, caller, main]` of 5).
struct StallStacksTests {
    static func names(_ stacks: StallStacks, _ stack: Int) -> [String] {
        stacks.stacks[stack].flatMap { location in
            stacks.locations[location].lines.map { stacks.strings[stacks.functions[$0.function].name] }
        }
    }

    @Test func aStallsDurationIsSharedAmongItsStacksAsItsSamplesAreAndAddsUpExactly() {
        var stacks = StallStacks()
        stacks.add(Fixture.report(durationMs: 200.000_001, topSymbol: "App.Worker.step()"))
        #expect(stacks.samples.count == 2, "two distinct stacks")
        let byStack = Dictionary(uniqueKeysWithValues: stacks.samples.map { (Self.names(stacks, $0.stack), $0) })
        let short = ["App.Worker.step()", Fixture.callerSymbol, "main"]
        let long = [Fixture.leafSymbol] + short
        #expect(byStack[short]?.nanoseconds == 50_000_000, "1 sample of 4")
        #expect(byStack[long]?.nanoseconds == 150_000_001, "3 of 4, and the rounding's remainder")
        #expect(stacks.samples.reduce(0) { $0 + $1.nanoseconds } == 200_000_001)
        #expect(byStack[long]?.stalls == 1 && byStack[short]?.stalls == 0, "the stall counts once, on its hottest stack")
    }

    @Test func inlinedFramesJoinThePhysicalFrameAfterThemInOneLocation() {
        var report = Fixture.report(durationMs: 100, topSymbol: "App.Worker.step()")
        report.frames[0].inlined = true  // the leaf inlined into the top frame
        var stacks = StallStacks()
        stacks.add(report)
        let long = stacks.samples.first { $0.stalls == 1 }  // the hottest, 3 samples
        let stack = try? #require(long).stack
        let first = stacks.locations[stacks.stacks[stack ?? 0][0]]
        #expect(first.lines.map { stacks.strings[stacks.functions[$0.function].name] }
                == [Fixture.leafSymbol, "App.Worker.step()"], "innermost line first, the physical frame last")
        #expect(first.lines.last?.line == 42)
    }

    @Test func anAwaitChainsFramesAreMarkedAndNamedAsWritten() {
        var report = Fixture.report(durationMs: 100, topSymbol: "App.Worker.step()")
        report.frames[2].symbol = "(3) await resume partial function for App.Server.handle(request:)"
        report.frames[2].async = true
        var stacks = StallStacks()
        stacks.add(report)
        let function = stacks.functions.first { stacks.strings[$0.name].hasSuffix(StallStacks.asyncSuffix) }
        #expect(function.map { stacks.strings[$0.name] } == "App.Server.handle(request:) [async]")
        #expect(function.map { stacks.strings[$0.systemName] }
                == "(3) await resume partial function for App.Server.handle(request:)")
    }

    @Test func aStallWithNoUsableSampleKeepsItsTimeUnderAPseudoFunction() {
        var report = Fixture.report(durationMs: 321, topSymbol: "App.Worker.step()")
        for index in report.samples.indices where report.samples[index].status == .ok {
            report.samples[index].idle = true
        }
        var stacks = StallStacks()
        stacks.add(report)
        #expect(stacks.samples.count == 1)
        #expect(Self.names(stacks, stacks.samples[0].stack) == [StallStacks.noStack])
        #expect(stacks.samples[0].nanoseconds == 321_000_000 && stacks.samples[0].stalls == 1)
    }

    @Test func labelsAreTheStallsLowCardinalityFieldsAndEmptyOnesAreLeftOut() {
        var report = GroupFixture.report(durationMs: 150, topSymbol: "App.Worker.step()", loop: "NIO-ELT-0-#3",
                                         stallClass: .blocked, signature: "0123456789abcdef")
        report.traceId = String(repeating: "a", count: 32)
        report.spanId = String(repeating: "b", count: 16)
        var stacks = StallStacks()
        stacks.add(report)
        let labels = Dictionary(uniqueKeysWithValues: stacks.samples[0].labels.map {
            (stacks.strings[$0.key], stacks.strings[$0.value])
        })
        #expect(labels == ["loop": "NIO-ELT-0-#3", "class": "blocked", "label": "timer.tick",
                           "signature": "0123456789abcdef", "build_id": "abc123"])
        #expect(stacks.samples[0].traceID == report.traceId && stacks.samples[0].spanID == report.spanId,
                "trace and span ride beside the labels, never as one")
        var unlabelled = StallStacks()
        unlabelled.add(Fixture.report(durationMs: 150, topSymbol: nil, label: ""))
        #expect(!unlabelled.samples[0].labels.contains { unlabelled.strings[$0.key] == "label" })
    }

    @Test func eachModuleHasAWindowOfItsOwnAndItsLocationsTheirOffsetsInIt() throws {
        var stacks = StallStacks()
        stacks.add(Fixture.report(durationMs: 100, topSymbol: "App.Worker.step()"))
        #expect(stacks.mappings.count == 2)
        for (index, mapping) in stacks.mappings.enumerated() {
            for other in stacks.mappings[(index + 1)...] {
                #expect(mapping.limit <= other.start || other.limit <= mapping.start, "disjoint windows")
            }
        }
        let libc = try #require(stacks.mappings.firstIndex { stacks.strings[$0.file] == Fixture.libc })
        let leaf = try #require(stacks.locations.first { $0.mapping == libc })
        #expect(leaf.address == stacks.mappings[libc].start + 0xe5f2a0)
        #expect(stacks.strings[stacks.mappings[libc].buildID] == "c0ffee")
    }

    @Test func locationsFunctionsAndStacksAreSharedAcrossReports() {
        var stacks = StallStacks()
        for index in 0..<50 {
            stacks.add(Fixture.report(durationMs: 100, topSymbol: "App.Worker.step()", start: Fixture.start(index)))
        }
        #expect(stacks.stalls == 50)
        #expect(stacks.stacks.count == 2 && stacks.locations.count == 4 && stacks.functions.count == 4)
        #expect(stacks.samples.reduce(0) { $0 + $1.stalls } == 50)
        #expect(stacks.earliestStart == WallTime.unixNanoseconds(Fixture.start(0)))
        #expect(stacks.latestEnd == WallTime.unixNanoseconds(Fixture.start(49)).map { $0 + 100_000_000 })
    }

    /// A duration no Int64 of nanoseconds holds (a report is outside input): saturated, never a trap, and the
    /// shares still add up to it.
    @Test func anEnormousOrNegativeDurationDoesNotTrap() {
        var stacks = StallStacks()
        stacks.add(Fixture.report(durationMs: 1e300, topSymbol: "App.Worker.step()"))
        #expect(stacks.samples.reduce(Int64(0)) { $0 &+ $1.nanoseconds } == Int64.max)
        stacks.add(Fixture.report(durationMs: -5, topSymbol: "App.Worker.step()"))
        #expect(stacks.samples.suffix(2).allSatisfy { $0.nanoseconds == 0 })
    }

    /// Reports with stacks of their own and shared ones: other modules, inlined and async frames, a stall with no
    /// usable sample, labels that differ.
    static func variedReports() -> [StallReport] {
        (0..<12).map { index in
            var report = Fixture.report(durationMs: Double(100 + index), topSymbol: "App.Worker.step\(index % 4)()",
                                        loop: index % 3 == 0 ? "main" : "io", start: Fixture.start(index),
                                        label: "route-\(index % 5)")
            if index % 2 == 0 { report.frames[2].module = "/opt/app/lib/libplugin\(index % 3).so" }
            if index % 3 == 1 { report.frames[0].inlined = true }
            if index % 4 == 2 { report.frames[1].async = true }
            if index == 7 { report.samples = report.samples.map { var sample = $0; sample.idle = true; return sample } }
            report.traceId = index % 2 == 0 ? "4bf92f3577b34da6a3ce929d0e0e47\(10 + index)" : nil
            report.spanId = index % 2 == 0 ? "00f067aa0ba902\(10 + index)" : nil
            return report
        }
    }

    @Test func mergingRunsFoldedApartGivesWhatAddingOneByOneGives() throws {
        let reports = Self.variedReports()
        var oneByOne = StallStacks()
        for report in reports { oneByOne.add(report) }
        var merged = StallStacks()
        for run in [0..<5, 5..<6, 6..<12] {
            var part = StallStacks()
            for report in reports[run] { part.add(report) }
            merged.merge(part)
        }
        #expect(merged.strings == oneByOne.strings)
        #expect(merged.functions == oneByOne.functions)
        #expect(merged.locations == oneByOne.locations)
        #expect(merged.mappings == oneByOne.mappings)
        #expect(merged.stacks == oneByOne.stacks)
        #expect(merged.samples.map(\.stack) == oneByOne.samples.map(\.stack))
        #expect(merged.samples.map(\.labels) == oneByOne.samples.map(\.labels))
        #expect(merged.samples.map(\.nanoseconds) == oneByOne.samples.map(\.nanoseconds))
        #expect(merged.stalls == 12 && merged.earliestStart == oneByOne.earliestStart
                && merged.latestEnd == oneByOne.latestEnd)
        #expect(try StallPprof.serialized(merged) == StallPprof.serialized(oneByOne), "the same profile, byte for byte")
        #expect(oneByOne.mappings.count > 2, "the reports span several modules, so windows move in the merge")
    }
}
