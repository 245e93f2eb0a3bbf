import Foundation

/// Reports' `start.wall` (ISO 8601 UTC, `2026-11-28T17:05:34.123Z`) as nanoseconds since the Unix epoch: what OTLP
/// logs, profiles and timelines stamp stalls with. The report's own shape is parsed by hand (a formatter costs
/// microseconds a call, seconds over 100,000 reports); any other ISO 8601 form goes through Foundation's formatter.
package enum WallTime {
    /// nil for text that is no ISO 8601 time, or one before 1970 or past what UInt64 nanoseconds hold (year 2554).
    package static func unixNanoseconds(_ text: String) -> UInt64? {
        var text = text
        return text.withUTF8 { bytes in fast(bytes) } ?? slow(text)
    }

    /// `YYYY-MM-DDTHH:MM:SS[.fraction]Z`, or nil.
    private static func fast(_ bytes: UnsafeBufferPointer<UInt8>) -> UInt64? {
        guard bytes.count >= 20, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"),
              bytes[10] == UInt8(ascii: "T"), bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"),
              bytes[bytes.count - 1] == UInt8(ascii: "Z") else { return nil }
        func number(_ range: Range<Int>) -> Int? {
            var value = 0
            for index in range {
                let digit = Int(bytes[index]) - 48
                guard (0...9).contains(digit) else { return nil }
                value = value * 10 + digit
            }
            return value
        }
        guard let year = number(0..<4), let month = number(5..<7), let day = number(8..<10),
              let hour = number(11..<13), let minute = number(14..<16), let second = number(17..<19),
              year >= 1970, (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61
        else { return nil }
        var fraction: UInt64 = 0
        if bytes.count > 20 {
            // `.` and 1 to 9 digits before the `Z`.
            guard bytes[19] == UInt8(ascii: "."), bytes.count - 21 >= 1, bytes.count - 21 <= 9,
                  let digits = number(20..<(bytes.count - 1)) else { return nil }
            var scale: UInt64 = 1
            for _ in 0..<(9 - (bytes.count - 21)) { scale *= 10 }
            fraction = UInt64(digits) * scale
        } else if bytes[19] != UInt8(ascii: "Z") {
            return nil
        }
        let days = daysFromCivil(year: year, month: month, day: day)
        let seconds = UInt64(days) * 86_400 + UInt64(hour * 3600 + minute * 60 + second)
        let nanoseconds = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        guard !nanoseconds.overflow else { return nil }
        let total = nanoseconds.partialValue.addingReportingOverflow(fraction)
        return total.overflow ? nil : total.partialValue
    }

    /// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
    private static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let shifted = month <= 2 ? year - 1 : year
        let era = (shifted >= 0 ? shifted : shifted - 399) / 400
        let yearOfEra = shifted - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    private static func slow(_ text: String) -> UInt64? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let date = formatter.date(from: text) ?? ISO8601DateFormatter().date(from: text)
        guard let seconds = date?.timeIntervalSince1970, seconds >= 0,
              seconds < Double(UInt64.max / 1_000_000_000) else { return nil }
        return UInt64((seconds * 1e9).rounded())
    }
}
