import Foundation
@testable import StallmonReport
import Testing

/// `WallTime` parses the reports' own ISO 8601 shape by hand: checked against Foundation's formatter.
struct WallTimeTests {
    @Test(arguments: ["2026-11-28T17:05:34.123Z", "1970-01-01T00:00:00.000Z", "2000-02-29T23:59:59.999Z",
                      "2026-11-28T17:05:34Z", "2026-03-01T00:00:00.5Z", "2099-12-31T12:00:00.123456789Z"])
    func theReportsShapeParsesAsFoundationDoes(text: String) throws {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = text.contains(".") ? [.withInternetDateTime, .withFractionalSeconds]
            : [.withInternetDateTime]
        let expected = try #require(formatter.date(from: text)).timeIntervalSince1970
        let parsed = try #require(WallTime.unixNanoseconds(text))
        #expect(abs(Double(parsed) / 1e9 - expected) < 0.001, "\(text)")
    }

    @Test func fractionsKeepTheirDigits() {
        #expect(WallTime.unixNanoseconds("1970-01-01T00:00:01.5Z") == 1_500_000_000)
        #expect(WallTime.unixNanoseconds("1970-01-01T00:00:00.000000001Z") == 1)
    }

    @Test(arguments: ["", "garbage", "2026-13-01T00:00:00Z", "1969-12-31T23:59:59Z", "2026-11-28T17:05:34.Z",
                      "2026-11-28 17:05:34Z"])
    func otherTextIsNoTime(text: String) {
        #expect(WallTime.unixNanoseconds(text) == nil, "\(text)")
    }

    @Test func otherISOFormsGoThroughFoundation() {
        #expect(WallTime.unixNanoseconds("2026-11-28T18:05:34+01:00") == WallTime.unixNanoseconds("2026-11-28T17:05:34Z"))
    }
}
