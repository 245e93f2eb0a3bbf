import Foundation
import Testing
@testable import StallmonReport
import StallmonTestSupport

/// `decodeDigest` and `StallReport.requiredKeys`.
@Suite("ReportReader digests")
struct ReportDigestTests {
    @Test("requiredKeys are exactly the members without which decode refuses a report")
    func requiredKeysMatchTheDecoder() throws {
        let data = try Fixture.encode(Fixture.report(durationMs: 150, topSymbol: "A.a()"))
        let object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        for key in object.keys.sorted() {
            var without = object
            without[key] = nil
            let bytes = try JSONSerialization.data(withJSONObject: without)
            let decodes = (try? ReportReader.decode(bytes, path: "r.json")) != nil
            #expect(decodes == !StallReport.requiredKeys.contains(key), "without \(key)")
            if !decodes {
                #expect(throws: ReportReadError.self, "the digest refuses a report without \(key) too") {
                    try ReportReader.decodeDigest(bytes, path: "r.json")
                }
            }
        }
    }

    @Test("the digest of a report file equals the digest of its decoded report")
    func digestMatchesTheReport() throws {
        for report in [Fixture.report(durationMs: 150, topSymbol: "A.a()"),
                       Fixture.report(durationMs: 99, topSymbol: nil, ongoing: true),
                       GroupFixture.report(durationMs: 300, topSymbol: "B.b()", stallClass: .cpu,
                                           signature: "00ff00ff00ff00ff", suppressedBefore: 3)] {
            let data = try Fixture.encode(report)
            #expect(try ReportReader.decodeDigest(data, path: "r.json") == StallDigest(report))
        }
    }

    /// A member the digest reads written in a way only Foundation decodes (here named twice) hands the file to
    /// Foundation: it decodes the digest, and a broken member outside it still does not hide the stall.
    @Test("a digest left to Foundation is Foundation's digest, whatever the members it does not read hold")
    func digestLeftToFoundation() throws {
        let data = try Fixture.encode(Fixture.report(durationMs: 150, topSymbol: "A.a()", loop: "io"))
        let text = String(decoding: data, as: UTF8.self).replacingOccurrences(of: #""loop" : "io""#, with: #""loop" : "io", "loop" : "io""#)
        let broken = text.replacingOccurrences(of: #""captures" : {"#, with: #""captures" : {"unused": 1}, "x" : {"#)
        #expect(broken != text)
        #expect(throws: ReportReadError.self) { try ReportReader.decode(Data(broken.utf8), path: "r.json") }
        let digest = try ReportReader.decodeDigest(Data(broken.utf8), path: "r.json")
        #expect(digest == (try JSONDecoder().decode(StallDigest.self, from: Data(broken.utf8))))
        #expect(digest.loop == "io" && digest.durationMs == 150)
    }

    @Test("a bad value inside a sample does not hide the stall from the summary, a bad summary value does")
    func whatTheDigestChecks() throws {
        let data = try Fixture.encode(Fixture.report(durationMs: 150, topSymbol: "A.a()"))
        var object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        object["samples"] = [["offsetMs": "not a number"]]
        let badSample = try JSONSerialization.data(withJSONObject: object)
        #expect(throws: ReportReadError.self) { try ReportReader.decode(badSample, path: "r.json") }
        #expect(try ReportReader.decodeDigest(badSample, path: "r.json").durationMs == 150)
        object["durationMs"] = "long"
        let badDuration = try JSONSerialization.data(withJSONObject: object)
        #expect(throws: ReportReadError.self) { try ReportReader.decodeDigest(badDuration, path: "r.json") }
    }
}
