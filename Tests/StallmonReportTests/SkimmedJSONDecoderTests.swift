import Foundation
import Testing
@testable import StallmonReport
import StallmonTestSupport

/// `SkimmedJSONDecoder`: the same values as Foundation's JSONDecoder wherever it decodes, and `Unsupported` (so that
/// Foundation decodes) wherever it could differ.
@Suite("SkimmedJSONDecoder")
struct SkimmedJSONDecoderTests {
    /// A report with every member the schema has, optional ones included, in a sample and a frame too.
    static func richReport() throws -> [String: Any] {
        let data = try Fixture.encode(Fixture.report(durationMs: 150, topSymbol: "A.a()"))
        var object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let summary: [String: Any] = ["symbol": "A.a()", "module": "/opt/app/bin/app", "file": "/src/A.swift",
                                      "line": 7]
        let hottest: [String: Any] = ["frames": [1, 2, 3], "samples": 3, "of": 5]
        let job: [String: Any] = ["executor": "global", "priority": "medium", "taskId": UInt64.max, "kind": "task",
                                  "taskName": "fetch"]
        let waiting: [String: Any] = [
            "kind": "mutex", "syscall": "futex", "target": "0x7f00", "holderThread": Int32.max,
            "holderName": "worker", "samples": 4, "holderStack": hottest, "holderTopFrame": summary,
            "holderWaiting": "read",
        ]
        let thread: [String: Any] = ["tid": -1, "name": "pool-1"]
        object["traceId"] = "4bf92f3577b34da6a3ce929d0e0e4736"
        object["spanId"] = "00f067aa0ba902b7"
        object["class"] = "blocked"
        object["threadStats"] = ["windowMs": 150.5, "cpuMs": 1e-3, "runDelayMs": 0, "sleepMs": 149.25,
                                 "voluntarySwitches": 3, "involuntarySwitches": 0]
        object["cpuContention"] = [
            "windowMs": 151, "periods": 2, "throttledPeriods": 1, "throttledMs": 12.75, "pressureSomePercent": 33.3,
            "pressureScope": "cgroup", "stealMs": 0.125, "stealWindowMs": 150, "watchdogRunDelayMs": 2.5,
            "limit": ["cpus": 0.5, "periodMs": 100, "cgroup": "/sys/fs/cgroup/app", "version": "v2"],
        ]
        object["frozenMs"] = -0.0
        object["signature"] = "00ff00ff00ff00ff"
        object["hottestStack"] = hottest
        object["callTree"] = [["frame": 3, "samples": 4, "children": [
            ["frame": 2, "samples": 4, "children": [["frame": 1, "samples": 4, "children": []]]],
        ]]]
        object["annotations"] = ["region": "eu-west-1", "": "empty key", "ünïcode": "välue ☃"]
        object["suppressedBefore"] = 2
        object["phase"] = "tasks"
        object["mode"] = "sampling"
        object["waitingOn"] = [waiting]
        object["job"] = job
        object["kind"] = "starvation"
        object["starvation"] = [
            "verdict": "saturated", "saturatedMs": 300, "oldestWaitMs": 280.5, "waitedJobs": 12, "jobsRun": 0,
            "workers": 2, "poolWidth": 2, "cpuLimit": 1.5,
            "culprits": [[
                "thread": thread, "job": job, "label": "GET /", "traceId": "t", "spanId": "s", "busyMs": 299.9,
                "heldThroughout": true, "class": "cpu", "topFrame": summary, "hottestStack": hottest,
                "waitingOn": [waiting], "signature": "abcd", "samples": 9,
            ]],
        ]
        object["hang"] = ["action": "abort", "afterMs": 5000]
        object["snapshot"] = ["entries": [[
            "name": "main", "kind": "loop", "thread": thread, "state": "R", "busyMs": 1, "label": "x",
            "traceId": "t", "spanId": "s", "job": job, "sample": 0, "topFrame": summary, "note": "n",
        ]]]
        var samples = try #require(object["samples"] as? [[String: Any]])
        samples[0].merge(["state": "D", "idle": false, "unknownImage": true, "waiting": 0, "holderState": "S",
                          "holderStatus": "ok", "holderFrames": [0, 1], "holderWaiting": "epoll_wait",
                          "awaitChainTruncated": true]) { _, new in new }
        object["samples"] = samples
        var frames = try #require(object["frames"] as? [[String: Any]])
        frames[0].merge(["inlined": true, "async": false, "file": "/src/libc/nanosleep.c", "line": 0]) { _, new in new }
        object["frames"] = frames
        return object
    }

    static func skimmedDecode<T: Decodable>(_ type: T.Type, _ bytes: [UInt8]) throws -> T {
        try bytes.withUnsafeBytes { buffer in
            _ = try JSONSkimmer.topLevelMembers(buffer)  // the decoder's precondition: a validated document
            return try SkimmedJSONDecoder.decode(T.self, from: buffer)
        }
    }

    @Test("a report with every member decodes to what Foundation decodes, and every optional member is set")
    func everyMember() throws {
        for options: JSONSerialization.WritingOptions in [[], [.prettyPrinted], [.sortedKeys]] {
            let bytes = [UInt8](try JSONSerialization.data(withJSONObject: Self.richReport(), options: options))
            let foundation = try JSONDecoder().decode(StallReport.self, from: Data(bytes))
            let skimmed = try Self.skimmedDecode(StallReport.self, bytes)
            #expect(skimmed == foundation)
            #expect(skimmed.job?.taskId == UInt64.max)
            #expect(skimmed.annotations?["ünïcode"] == "välue ☃")
            #expect(skimmed.frozenMs?.sign == .minus, "-0.0 keeps its sign")
            // Samples and frames are read member by member (`SkimmedDecodable`): every member must be in the test.
            for value in [skimmed as Any, skimmed.samples[0], skimmed.frames[0]] {
                let unset = Mirror(reflecting: value).children.filter { "\($0.value)" == "nil" }.map { $0.label ?? "?" }
                #expect(unset.isEmpty, "members of \(type(of: value)) this test leaves out: \(unset)")
            }
        }
    }

    /// Decodes `{"a": …}` as `Value` with both decoders.
    struct Box<Value: Decodable & Equatable>: Decodable, Equatable {
        var a: Value
    }

    struct OptionalBox<Value: Decodable & Equatable>: Decodable, Equatable {
        var a: Value?
    }

    @Test("what only Foundation may decode is left to it", arguments: [
        #"{"a": "x", "a": "y"}"#, #"{"a": "x", "\u0061": "y"}"#, #"{"a": null}"#, #"{"a": 1}"#,
        #"{"b": "x"}"#, #"{"a": ["x"]}"#,
    ])
    func leftToFoundationForStrings(_ json: String) {
        #expect(throws: SkimmedJSONDecoder.Unsupported.self) { try Self.skimmedDecode(Box<String>.self, Array(json.utf8)) }
    }

    @Test("integers written otherwise than as integers, or out of range, are left to Foundation", arguments: [
        #"{"a": 1.0}"#, #"{"a": 1e2}"#, #"{"a": 1E2}"#, #"{"a": 9223372036854775808}"#,
        #"{"a": -9223372036854775809}"#, #"{"a": true}"#, #"{"a": "1"}"#,
    ])
    func leftToFoundationForIntegers(_ json: String) {
        #expect(throws: SkimmedJSONDecoder.Unsupported.self) { try Self.skimmedDecode(Box<Int>.self, Array(json.utf8)) }
    }

    @Test("escapes in strings and keys read as Foundation reads them", arguments: [
        #"{"a": "quote \" inside"}"#, #"{"\u0061": "x"}"#, #"{"a": "\\ \/ \b\f\n\r\t"}"#,
        #"{"a": "\u00e9 \u2603 \ud83d\ude00 \u0000 é ☃ 😀"}"#, #"{"a": "\"\""}"#, #"{"a": "end\\"}"#,
    ])
    func escapes(_ json: String) throws {
        #expect(try Self.skimmedDecode(Box<String>.self, Array(json.utf8))
            == JSONDecoder().decode(Box<String>.self, from: Data(json.utf8)))
    }

    @Test("integer edges and doubles decode as Foundation decodes them")
    func numbers() throws {
        for json in [#"{"a": 9223372036854775807}"#, #"{"a": -9223372036854775808}"#, #"{"a": -0}"#, #"{"a": 0}"#] {
            #expect(try Self.skimmedDecode(Box<Int>.self, Array(json.utf8))
                == JSONDecoder().decode(Box<Int>.self, from: Data(json.utf8)))
        }
        for json in [#"{"a": 0.1}"#, #"{"a": -2.5e-3}"#, #"{"a": 1E+2}"#, #"{"a": 12345678901234567890}"#,
                     #"{"a": 1.7976931348623157e308}"#, #"{"a": 5e-324}"#, #"{"a": 0.30000000000000004}"#] {
            #expect(try Self.skimmedDecode(Box<Double>.self, Array(json.utf8))
                == JSONDecoder().decode(Box<Double>.self, from: Data(json.utf8)), "\(json)")
        }
        for json in [#"{"a": 1e400}"#, #"{"a": -1e400}"#, #"{"a": 1e-400}"#] {
            #expect(throws: SkimmedJSONDecoder.Unsupported.self) {
                try Self.skimmedDecode(Box<Double>.self, Array(json.utf8))
            }
        }
        #expect(throws: SkimmedJSONDecoder.Unsupported.self) {
            try Self.skimmedDecode(Box<Int8>.self, Array(#"{"a": 128}"#.utf8))
        }
        #expect(try Self.skimmedDecode(Box<Int8>.self, Array(#"{"a": -128}"#.utf8)).a == -128)
        #expect(throws: SkimmedJSONDecoder.Unsupported.self) {
            try Self.skimmedDecode(Box<UInt64>.self, Array(#"{"a": -1}"#.utf8))
        }
    }

    @Test("optional members: absent and null are nil, a repeated key is left to Foundation")
    func optionals() throws {
        #expect(try Self.skimmedDecode(OptionalBox<String>.self, Array(#"{}"#.utf8)).a == nil)
        #expect(try Self.skimmedDecode(OptionalBox<String>.self, Array(#"{"a": null}"#.utf8)).a == nil)
        #expect(try Self.skimmedDecode(OptionalBox<[Int]>.self, Array(#"{"a": [ 1 , 2 ]}"#.utf8)).a == [1, 2])
        #expect(try Self.skimmedDecode(OptionalBox<String>.self, Array(#"{"\u0061": "x"}"#.utf8)).a == "x")
        for json in [#"{"a": "x", "a": null}"#, #"{"\u0061": "x", "a": null}"#] {
            #expect(throws: SkimmedJSONDecoder.Unsupported.self) {
                try Self.skimmedDecode(OptionalBox<String>.self, Array(json.utf8))
            }
        }
    }

    @Test("a dictionary's keys are unescaped; one with a repeated key is left to Foundation")
    func dictionaries() throws {
        let plain = #"{"a": {"x": "1", "y": "2"}}"#
        #expect(try Self.skimmedDecode(Box<[String: String]>.self, Array(plain.utf8)).a == ["x": "1", "y": "2"])
        #expect(try Self.skimmedDecode(Box<[String: String]>.self, Array(#"{"a": {"\u0078": "1"}}"#.utf8)).a == ["x": "1"])
        for json in [#"{"a": {"x": "1", "x": "2"}}"#, #"{"a": {"\u0078": "1", "x": "2"}}"#] {
            #expect(throws: SkimmedJSONDecoder.Unsupported.self) {
                try Self.skimmedDecode(Box<[String: String]>.self, Array(json.utf8))
            }
        }
    }

    struct Kelvin: Decodable, Equatable {
        var K: String  // swiftlint:disable:this identifier_name
    }

    /// Counts its elements before reading them, as some `init(from:)` do.
    struct Counted: Decodable, Equatable {
        var count: Int?
        var values: [Int] = []

        init(from decoder: any Decoder) throws {
            var container = try decoder.unkeyedContainer()
            count = container.count
            while !container.isAtEnd { values.append(try container.decode(Int.self)) }
        }
    }

    @Test("keys compare as Foundation compares them (as strings), and an array's count is Foundation's")
    func keysAndCounts() throws {
        // U+212A KELVIN SIGN is canonically the letter K: whatever Foundation makes of it, the decoder does too.
        for json in [#"{"\u212A": "kelvin"}"#, #"{"K": "k"}"#, "{\"\u{212A}\": \"raw\"}"] {
            let foundation = try? JSONDecoder().decode(Kelvin.self, from: Data(json.utf8))
            let skimmed = try? Self.skimmedDecode(Kelvin.self, Array(json.utf8))
            #expect(skimmed == foundation, "\(json)")
        }
        for json in ["[]", "[1]", "[ 1 , 2 ,3 ]"] {
            #expect(try Self.skimmedDecode(Counted.self, Array(json.utf8))
                == JSONDecoder().decode(Counted.self, from: Data(json.utf8)))
        }
    }

    @Test("types Foundation decodes its own way are left to it")
    func specialTypes() {
        #expect(throws: SkimmedJSONDecoder.Unsupported.self) {
            try Self.skimmedDecode(Box<Date>.self, Array(#"{"a": 0}"#.utf8))
        }
        #expect(throws: SkimmedJSONDecoder.Unsupported.self) {
            try Self.skimmedDecode(Box<URL>.self, Array(#"{"a": "http://x"}"#.utf8))
        }
        #expect(throws: SkimmedJSONDecoder.Unsupported.self) {
            try Self.skimmedDecode(Box<Float>.self, Array(#"{"a": 1.5}"#.utf8))
        }
    }

    /// Tokens a mutation puts in place of a value.
    static let tokens = [
        "0", "-1", "1.5", "1e2", "1E-400", "1e400", "-0", "9223372036854775808", "18446744073709551615",
        "18446744073709551616", "2147483648", #""ok""#, #""R""#, #""é""#, #""\u00e9""#, #""a\"b""#, #""""#, "true",
        "false", "null", "[]", "{}", "[1, 2]", #"{"symbol": "x"}"#,
    ]

    @Test("on mutated reports, the reader's values and refusals are Foundation's, and the fast path is taken")
    func mutations() throws {
        let original = [UInt8](try JSONSerialization.data(withJSONObject: Self.richReport(), options: [.sortedKeys]))
        var random = SeededRandom(seed: 44)
        var fast = 0
        var left = 0
        for _ in 0..<400 {
            var mutant = original
            // A member's colon comes right after its key's closing quote (no whitespace in this encoding).
            let colons = mutant.indices.filter { mutant[$0] == UInt8(ascii: ":") && mutant[$0 - 1] == UInt8(ascii: "\"") }
            let colon = random.pick(colons)
            let valueEnd = try Self.valueEnd(in: mutant, from: colon + 1)
            if random.chance(15) {
                // Repeat the member: a duplicate key.
                let keyStart = mutant[..<colon].lastIndex(of: UInt8(ascii: ",")) ?? mutant[..<colon].lastIndex(of: UInt8(ascii: "{"))!
                let member = Array(mutant[(keyStart + 1)..<valueEnd])
                mutant.insert(contentsOf: member + [UInt8(ascii: ",")], at: keyStart + 1)
            } else {
                mutant.replaceSubrange((colon + 1)..<valueEnd, with: Array(random.pick(Self.tokens).utf8))
            }
            let foundation = Result { try JSONDecoder().decode(StallReport.self, from: Data(mutant)) }
            let foundationReads = (try? foundation.get())?.schema == StallReport.currentSchema
            let valid = mutant.withUnsafeBytes { (try? JSONSkimmer.topLevelMembers($0)) != nil }
            if valid {
                switch Result(catching: { try Self.skimmedDecode(StallReport.self, mutant) }) {
                case .success(let report):
                    fast += 1
                    #expect(try foundation.get() == report, "\(String(decoding: mutant, as: UTF8.self))")
                case .failure:
                    left += 1
                }
            }
            let read = Result { try ReportReader.decode(Data(mutant), path: "r.json") }
            switch (read, foundation) {
            case (.success(let mine), .success(let theirs)): #expect(mine == theirs)
            case (.failure, _) where !foundationReads: break
            default: Issue.record("the reader and Foundation disagree on \(String(decoding: mutant, as: UTF8.self))")
            }
        }
        #expect(fast > 50 && left > 50, "both paths exercised: \(fast) fast, \(left) left to Foundation")
    }

    /// Just past the JSON value starting at or after `start` (the test's own scan, not the skimmer's).
    static func valueEnd(in bytes: [UInt8], from start: Int) throws -> Int {
        var index = start
        while bytes[index] == UInt8(ascii: " ") || bytes[index] == UInt8(ascii: "\n") { index += 1 }
        var depth = 0
        var inString = false
        while index < bytes.count {
            let byte = bytes[index]
            if inString {
                if byte == UInt8(ascii: "\\") { index += 2; continue }
                if byte == UInt8(ascii: "\"") {
                    inString = false
                    if depth == 0 { return index + 1 }
                }
            } else {
                switch byte {
                case UInt8(ascii: "\""): inString = true
                case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"):
                    if depth == 0 { return index }
                    depth -= 1
                    if depth == 0 { return index + 1 }
                case UInt8(ascii: ","): if depth == 0 { return index }
                default: break
                }
            }
            index += 1
        }
        throw CancellationError()
    }
}
