import Foundation
import Stallmon
import StallmonReport

/// An int64 as the OTLP JSON mapping writes it: a string, though a number is accepted too.
struct FlexibleInt: Decodable {
    var value: Int
    init(from decoder: Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let number = try? container.decode(Int.self) {
            value = number
        } else {
            value = Int(try container.decode(String.self)) ?? 0
        }
    }
}

/// `partialSuccess` of an OTLP ExportLogsServiceResponse.
struct OTLPPartialSuccess: Decodable {
    var rejected: Int
    var message: String?

    static func parse(_ body: String) -> OTLPPartialSuccess? {
        struct Response: Decodable {
            struct Partial: Decodable {
                var rejectedLogRecords: FlexibleInt?
                var errorMessage: String?
            }
            var partialSuccess: Partial?
        }
        guard !body.isEmpty, let data = body.data(using: .utf8),
              let response = try? JSONDecoder().decode(Response.self, from: data),
              let partial = response.partialSuccess else { return nil }
        let count = partial.rejectedLogRecords?.value ?? 0
        let message = partial.errorMessage.flatMap { $0.isEmpty ? nil : $0 }
        return count == 0 && message == nil ? nil : OTLPPartialSuccess(rejected: count, message: message)
    }
}
