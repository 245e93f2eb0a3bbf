import Foundation
@testable import StallmonReport

/// The skimmer checked against Foundation's JSONSerialization, for the skimmer's own tests and the fuzz suite.
public enum JSONOracle {
    public static func skims(_ text: String) -> Bool {
        skims(Array(text.utf8))
    }

    public static func skims(_ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { (try? JSONSkimmer.validate($0)) != nil }
    }

    public static func foundationAccepts(_ bytes: [UInt8]) -> Bool {
        (try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed])) != nil
    }

    /// Nil when the skimmer and Foundation's JSONSerialization agree on whether `bytes` is JSON, or differ only as
    /// documented: Foundation accepts trailing commas, and refuses numbers beyond Double's range.
    public static func disagreementWithFoundation(_ bytes: [UInt8]) -> String? {
        var refusal: (any Error)?
        do {
            _ = try JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed])
        } catch {
            refusal = error
        }
        switch (refusal, skims(bytes)) {
        case (nil, true), (.some, false):
            return nil
        case (nil, false):
            let withoutTrailingCommas = String(decoding: bytes, as: UTF8.self).replacing(/,(\s*[}\]])/) { $0.output.1 }
            return skims(withoutTrailingCommas) ? nil : "Foundation accepts, the skimmer refuses"
        case (.some(let error), true):
            return "\(error)".contains("not representable") ? nil : "Foundation refuses (\(error)), the skimmer accepts"
        }
    }
}
