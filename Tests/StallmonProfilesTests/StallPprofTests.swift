import Foundation
@testable import StallmonProfiles
import StallmonReport
import StallmonTestSupport
import SwiftProtobuf
import Testing

/// `StallPprof`: the profile's shape as pprof readers require it (ids from 1, `string_table[0]` empty, every id
/// referenced exists) and as stallmon documents it (sample types, labels, `span_id` only for traced stalls).
struct StallPprofTests {
    static func profile() throws -> Perftools_Profiles_Profile {
        var stacks = StallStacks()
        var traced = GroupFixture.report(durationMs: 400, topSymbol: "App.Worker.step()", stallClass: .cpu)
        traced.traceId = String(repeating: "a", count: 32)
        traced.spanId = "00f067aa0ba902b7"
        stacks.add(traced)
        stacks.add(GroupFixture.report(durationMs: 200, topSymbol: "App.Cache.evict()", start: Fixture.start(5),
                                       stallClass: .blocked))
        let bytes = try StallPprof.serialized(stacks)
        return try Perftools_Profiles_Profile(serializedBytes: bytes)
    }

    @Test func theProfileRoundTripsAndItsReferencesHold() throws {
        let profile = try Self.profile()
        let strings = profile.stringTable
        #expect(strings.first == "")
        #expect(profile.sampleType.map { [strings[Int($0.type)], strings[Int($0.unit)]] }
                == [["stalls", "count"], ["stall_time", "nanoseconds"]])
        #expect(strings[Int(profile.defaultSampleType)] == "stall_time")
        let locations = Set(profile.location.map(\.id))
        let functions = Set(profile.function.map(\.id))
        let mappings = Set(profile.mapping.map(\.id))
        #expect(!locations.contains(0) && !functions.contains(0) && !mappings.contains(0), "ids start at 1")
        for location in profile.location {
            #expect(location.mappingID == 0 || mappings.contains(location.mappingID))
            for line in location.line { #expect(functions.contains(line.functionID)) }
        }
        for sample in profile.sample {
            #expect(sample.value.count == 2)
            for id in sample.locationID { #expect(locations.contains(id)) }
        }
        #expect(profile.sample.reduce(0) { $0 + $1.value[1] } == 600_000_000, "the stalls' total time")
        #expect(profile.sample.reduce(0) { $0 + $1.value[0] } == 2, "two stalls")
        #expect(profile.timeNanos == Int64(WallTime.unixNanoseconds(Fixture.start(0))!))
        #expect(profile.durationNanos == 5_200_000_000)
    }

    @Test func onlyATracedStallsSamplesCarryItsSpanAndNoneCarriesATrace() throws {
        let profile = try Self.profile()
        let strings = profile.stringTable
        for sample in profile.sample {
            let labels = Dictionary(uniqueKeysWithValues: sample.label.map {
                (strings[Int($0.key)], strings[Int($0.str)])
            })
            #expect(labels["trace_id"] == nil)
            if labels["class"] == "cpu" {
                #expect(labels["span_id"] == "00f067aa0ba902b7")
            } else {
                #expect(labels["span_id"] == nil && labels["class"] == "blocked")
            }
        }
    }

    @Test func stallsOfOneStackAndLabelsAreOneSampleAndTracedOnesKeepTheirSpans() throws {
        var stacks = StallStacks()
        for index in 0..<3 {  // alike: one sample per stack
            stacks.add(GroupFixture.report(durationMs: 100, topSymbol: "App.Worker.step()", start: Fixture.start(index),
                                           stallClass: .cpu))
        }
        for (index, span) in ["00f067aa0ba902b7", "00f067aa0ba902b8"].enumerated() {  // alike but for their spans
            var traced = GroupFixture.report(durationMs: 100, topSymbol: "App.Worker.step()",
                                             start: Fixture.start(10 + index), stallClass: .cpu)
            traced.traceId = String(repeating: "a", count: 32)
            traced.spanId = span
            stacks.add(traced)
        }
        #expect(stacks.samples.count == 10, "two stacks a stall in the tables")
        let profile = try Perftools_Profiles_Profile(serializedBytes: StallPprof.serialized(stacks))
        #expect(profile.sample.count == 6, "two stacks, each for the untraced stalls and for each span")
        #expect(profile.sample.reduce(0) { $0 + $1.value[1] } == 500_000_000)
        #expect(profile.sample.reduce(0) { $0 + $1.value[0] } == 5)
        let untraced = profile.sample.filter { !$0.label.contains { profile.stringTable[Int($0.key)] == "span_id" } }
        #expect(untraced.map(\.value[1]).sorted() == [75_000_000, 225_000_000], "3 stalls of 25 and 75 ms each")
    }
}
