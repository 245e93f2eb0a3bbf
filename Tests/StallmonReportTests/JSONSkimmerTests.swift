import Foundation
import Testing
@testable import StallmonReport
import StallmonTestSupport

/// `JSONSkimmer`: RFC 8259 syntax without building values, checked case by case against Foundation's
/// JSONSerialization, and the top-level members it hands to `decodeDigest`.
@Suite("JSONSkimmer")
struct JSONSkimmerTests {
    static let valid = [
        "{}", "[]", " { } ", "0", "-0", "1.5e-3", "-12.25E+2", "true", "false", "null", "\"\"",
        #"{"a": [1, 2, {"b": null}], "c": "d\"e\\f\/g\b\f\n\r\t\u00e9\uD83D\uDE00"}"#,
        "[\"ascii\", \"é\", \"日本\", \"😀\"]", "[[[[[]]]]]", "{\"a\":{\"b\":{\"c\":[true,false]}}}",
        "\n\t\r [1 ,2 , 3 ] \n", "\"        spaces inside a string that runs past eight bytes       \"",
    ]

    static let invalid = [
        "", " ", "{", "}", "[", "]", "{]", "[}", "{\"a\"}", "{\"a\":}", "[,1]", "{,}",
        "{a:1}", "{'a':1}", "01", "1.", ".5", "1e", "1e+", "-", "+1", "0x10", "tru", "truex", "nul", "NaN",
        "Infinity", "\"unterminated", "\"bad \\x escape\"", "\"\\u12G4\"", "\"control \u{01} char\"",
        "\"tab\tinside\"", "[1] [2]", "{} x", "[1 2]", "{\"a\" 1}", "{\"a\":1 \"b\":2}", "\"a\"\"b\"",
        #""\uD83D""#, #""\uDE00""#, #""\uD83D\u0041""#, #""\uD83Dx""#,  // UTF-16 surrogates must pair
    ]

    /// Valid JSON that Foundation refuses (no Double for it), and invalid JSON Foundation accepts.
    static let documentedDifferences = (refusedByFoundation: ["1e309", "[-1e400]"], acceptedByFoundation: ["[1,]", "{\"a\":1,}"])

    @Test("valid documents are valid, invalid ones are not, as Foundation says")
    func agreesWithFoundationOnHandPickedCases() {
        for text in Self.valid {
            #expect(JSONOracle.skims(text), "valid: \(text)")
            #expect(JSONOracle.foundationAccepts(Array(text.utf8)), "Foundation agrees it is valid: \(text)")
        }
        for text in Self.invalid {
            #expect(!JSONOracle.skims(text), "invalid: \(text.debugDescription)")
            #expect(!JSONOracle.foundationAccepts(Array(text.utf8)), "Foundation agrees it is invalid: \(text.debugDescription)")
        }
    }

    @Test("the documented differences from Foundation are the only ones")
    func documentedDifferences() {
        for text in Self.documentedDifferences.refusedByFoundation {
            #expect(JSONOracle.skims(text) && !JSONOracle.foundationAccepts(Array(text.utf8)), "\(text)")
            #expect(JSONOracle.disagreementWithFoundation(Array(text.utf8)) == nil)
        }
        for text in Self.documentedDifferences.acceptedByFoundation {
            #expect(!JSONOracle.skims(text) && JSONOracle.foundationAccepts(Array(text.utf8)), "\(text)")
            #expect(JSONOracle.disagreementWithFoundation(Array(text.utf8)) == nil)
        }
    }

    @Test("malformed UTF-8 inside strings is refused, well-formed is accepted")
    func utf8() {
        let wellFormed: [[UInt8]] = [[0xC3, 0xA9], [0xE6, 0x97, 0xA5], [0xF0, 0x9F, 0x98, 0x80], [0xEF, 0xBF, 0xBF],
                                     [0xF4, 0x8F, 0xBF, 0xBF]]
        let malformed: [[UInt8]] = [
            [0x80], [0xBF], [0xC0, 0x80], [0xC1, 0xBF],  // lone continuation, overlong two-byte
            [0xE0, 0x80, 0x80], [0xED, 0xA0, 0x80],  // overlong three-byte, a UTF-16 surrogate
            [0xF0, 0x80, 0x80, 0x80], [0xF4, 0x90, 0x80, 0x80], [0xF5, 0x80, 0x80, 0x80],  // overlong, > U+10FFFF
            [0xC3], [0xE6, 0x97], [0xF0, 0x9F, 0x98],  // truncated
            [0xFF], [0xC3, 0x28],
        ]
        for sequence in wellFormed {
            let bytes = [UInt8(ascii: "\"")] + sequence + Array("padding to pass eight\"".utf8)
            #expect(JSONOracle.skims(bytes), "\(sequence)")
            #expect(JSONOracle.foundationAccepts(bytes))
        }
        for sequence in malformed {
            for padding in ["\"", "0123456789abcdef\""] {
                let bytes = [UInt8(ascii: "\"")] + sequence + Array(padding.utf8)
                #expect(!JSONOracle.skims(bytes), "\(sequence) then \(padding)")
                #expect(!JSONOracle.foundationAccepts(bytes), "Foundation agrees: \(sequence)")
            }
        }
    }

    @Test("a special byte at every position of the eight-byte fast path is seen")
    func everyPositionOfTheWidePath() {
        for position in 0..<16 {
            for special: UInt8 in [UInt8(ascii: "\""), UInt8(ascii: "\\"), 0x01, 0x1F, 0x80, 0xFF] {
                var body = [UInt8](repeating: UInt8(ascii: "a"), count: 16)
                body[position] = special
                let bytes = [UInt8(ascii: "\"")] + body + [UInt8(ascii: "\"")]
                #expect(JSONOracle.skims(bytes) == JSONOracle.foundationAccepts(bytes), "byte \(special) at \(position)")
            }
            var spaces = [UInt8](repeating: 0x20, count: 16)
            spaces[position] = UInt8(ascii: "x")
            let bytes = Array("[1,".utf8) + spaces + [UInt8(ascii: "]")]
            #expect(!JSONOracle.skims(bytes), "a stray byte after \(position) spaces")
        }
    }

    @Test("nesting deeper than Foundation's limit is refused without exhausting the stack")
    func deepNesting() {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(!JSONOracle.skims(deep))
        let fine = String(repeating: "[", count: 100) + String(repeating: "]", count: 100)
        #expect(JSONOracle.skims(fine))
    }

    @Test("top-level members: raw keys and value ranges, in order; nil for a document that is not an object")
    func members() throws {
        let text = #"{ "a" : 1, "b\"c": {"x": [1, "]"]}, "d": "e" }"#
        let bytes = Array(text.utf8)
        let members = try bytes.withUnsafeBytes { try JSONSkimmer.topLevelMembers($0) }
        let pairs = try #require(members).map { member in
            (String(decoding: bytes[member.key], as: UTF8.self), String(decoding: bytes[member.value], as: UTF8.self))
        }
        #expect(pairs.map(\.0) == ["a", #"b\"c"#, "d"])
        #expect(pairs.map(\.1) == ["1", #"{"x": [1, "]"]}"#, "\"e\""])
        #expect(try Array("[1]".utf8).withUnsafeBytes { try JSONSkimmer.topLevelMembers($0) } == nil)
        #expect(throws: JSONSkimmer.SyntaxError.self) {
            try Array("{\"a\": [}".utf8).withUnsafeBytes { try JSONSkimmer.topLevelMembers($0) }
        }
    }
}

