import Foundation
@testable import Stallmon
import StallmonTestSupport
import Testing

/// A configuration error never shows a line that could hold a secret, and a secret with `#` or `=` in it is read
/// whole (it used to be cut at `#`, then fail with 401).
@Suite struct FaultConfigSecretTests {
    static let token = "c2VjcmV0LXRva2VuLXZhbHVlLTQyNDI="

    static func load(_ text: String) -> Result<StallMonitorConfiguration, ConfigurationError> {
        let path = makeTemporaryDirectory() + "/stallmon.conf"
        try! text.write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: AtomicFile.parentDirectory(of: path)) }
        return Result { () throws(ConfigurationError) in try StallMonitorConfiguration.load(file: path, environment: [:]) }
    }

    /// No run of 6 or more characters of `secret` appears in `message`.
    static func leaks(_ secret: String, in message: String) -> Bool {
        let characters = Array(secret)
        guard characters.count >= 6 else { return message.contains(secret) }
        return (0...(characters.count - 6)).contains { message.contains(String(characters[$0..<$0 + 6])) }
    }

    @Test(arguments: [
        "\(token)",  // a token pasted on a line of its own, `=` padding and all
        "\(token)==",
        "  \(token) = x",
        "upload_tokn = \(token)",  // a misspelt key
        "upload_token = \"\(token)",  // no closing quote
        "upload_token = \"\(token)\" trailing",
        "upload_headers = X-Api-Key \(token): v",  // a header name that is not one
        "upload_token_file = \(token)",  // a token where a path belongs
    ])
    func aLineThatMayHoldASecretIsNeverEchoed(line: String) {
        switch Self.load("threshold_ms = 100\n\(line)\n") {
        case .success: Issue.record("accepted \(line)")
        case .failure(let error):
            #expect(!Self.leaks(Self.token, in: error.description), "leaks the secret: \(error.description)")
            #expect(error.description.contains("stallmon.conf:2") || line.hasPrefix("upload_headers")
                || line.hasPrefix("upload_token_file"), "names the line: \(error.description)")
        }
    }

    @Test func aMisspeltKeyIsSuggestedWithoutBeingEchoed() {
        guard case .failure(let error) = Self.load("upload_tokn = \(Self.token)\n") else {
            Issue.record("accepted")
            return
        }
        #expect(error.description.contains("did you mean `upload_token`?"), "\(error.description)")
    }

    @Test(arguments: [
        ("upload_token = ab#cd==", "ab#cd=="),
        ("upload_token = ab#cd==   # the comment after whitespace", "ab#cd=="),
        ("upload_token = \"ab #cd\" # quoted: kept whole", "ab #cd"),
        ("upload_token = \"with \\\"quotes\\\" and \\\\\"", "with \"quotes\" and \\"),
        ("upload_token = \"\"", nil),
    ])
    func aTokenWithHashOrEqualsIsReadWhole(line: String, expected: String?) throws {
        let configuration = try Self.load("\(line)\n").get()
        #expect(configuration.upload.token == expected)
    }

    @Test func commentsStillWork() throws {
        let configuration = try Self.load("# a comment\n  # indented\nthreshold_ms = 250 # ms\nmax_samples = 7\t# tab\n")
            .get()
        #expect(configuration.detection.threshold == .milliseconds(250))
        #expect(configuration.detection.maxSamples == 7)
    }

    @Test func aValueGluedToAHashIsAValueNotAComment() {
        // `7#x` is one value (comments need whitespace before `#`), so it is an invalid number, named with its line.
        guard case .failure(let error) = Self.load("max_samples = 7#x\n") else {
            Issue.record("accepted")
            return
        }
        #expect(error.description.contains("max_samples = 7#x"), "\(error.description)")
    }
}
