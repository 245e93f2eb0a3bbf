import CStallmonCapture
import Foundation
@testable import Stallmon
import StallmonLoop
@testable import StallmonReport
import StallmonTestSupport
@testable import StallmonUpload
import Testing

// MARK: - Mutations

/// Seeded random mutations of a corpus: byte flips, truncation, duplication, deletion, splicing, JSON tokens, huge
/// numbers, deep nesting, hostile strings, and (for JSON) structural edits of the parsed document.
struct FaultMutator {
    var random: SeededRandom
    let corpus: [[UInt8]]
    /// The corpus parsed with JSONSerialization (reports only), for structural edits.
    let documents: [Any]

    init(seed: UInt64, corpus: [String], json: Bool) {
        random = SeededRandom(seed: seed)
        self.corpus = corpus.map { Array($0.utf8) }
        documents = json ? corpus.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) } : []
    }

    static let jsonTokens = [
        "{", "}", "[", "]", ",", ":", "\"", "\\", "null", "true", "false", "-", "0", "-1", "1e999", "{}", "[]",
        "\"\\u0000\"", "\"\\ud800\"", "\"\\uDFFF\\uD800\"", "\"schema\":", "\"schema\":\"stallmon.report/2\",",
        "\"frames\":[-1],", "\"samples\":[{}],", ",,", "\"\":\"\",", "/*", "\u{FEFF}", "\u{0}", "\u{7F}",
    ]

    static let hugeNumbers = [
        "1e309", "-1e309", "1e308", "-1e308", "1.7976931348623157e308", "4.9e-324", "1e-400", "-0", "-0.0",
        "18446744073709551615", "18446744073709551616", "9223372036854775807", "9223372036854775808",
        "-9223372036854775808", "-9223372036854775809", "4294967296", "2147483648", "-2147483649",
        "123456789012345678901234567890123456789", "0.00000000000000000000000000001", "1E+2", "-1", "NaN",
        "Infinity", "-Infinity", "0x10", "1.", ".5", "01", "+1",
    ]

    static let interestingBytes: [UInt8] = [0x00, 0xFF, 0x7F, 0x80, 0xC0, 0xC3, 0xE2, 0xF0, 0x22, 0x5C, 0x7B, 0x7D,
                                            0x5B, 0x5D, 0x2C, 0x3A, 0x0A, 0x0D, 0x09, 0x20, 0x3D, 0x23, 0x2D, 0x2B]

    /// One input: a corpus entry with 1–3 mutations applied; also the names of the mutations.
    mutating func next(lineMutations: Bool = false) -> (bytes: [UInt8], kinds: [String]) {
        var kinds: [String] = []
        var bytes: [UInt8]
        var rounds = random.between(1...3)
        if !documents.isEmpty && random.chance(40) {
            // Structural edits keep the JSON valid, so they reach the decoder's typing and the consumers; only some
            // get byte damage on top.
            bytes = structural()
            kinds.append("structural")
            rounds = random.chance(25) ? 1 : 0
        } else {
            bytes = random.pick(corpus)
        }
        for _ in 0..<rounds {
            let kind = lineMutations && random.chance(45) ? lineMutation(&bytes) : byteMutation(&bytes)
            kinds.append(kind)
        }
        return (bytes, kinds)
    }

    private mutating func position(in bytes: [UInt8]) -> Int { random.below(bytes.count + 1) }

    private mutating func byteMutation(_ bytes: inout [UInt8]) -> String {
        switch random.below(11) {
        case 0:
            guard !bytes.isEmpty else { return "flip(empty)" }
            for _ in 0..<random.between(1...8) { bytes[random.below(bytes.count)] ^= UInt8(1) << UInt8(random.below(8)) }
            return "flip"
        case 1:
            guard !bytes.isEmpty else { return "set(empty)" }
            for _ in 0..<random.between(1...4) { bytes[random.below(bytes.count)] = random.pick(Self.interestingBytes) }
            return "set"
        case 2:
            bytes = Array(bytes.prefix(random.below(bytes.count + 1)))
            return "truncate"
        case 3:
            let start = position(in: bytes)
            let end = min(bytes.count, start + random.between(1...512))
            let slice = Array(bytes[start..<end])
            for _ in 0..<random.between(1...3) { bytes.insert(contentsOf: slice, at: position(in: bytes)) }
            return "duplicate"
        case 4:
            let start = position(in: bytes)
            let end = min(bytes.count, start + random.between(1...256))
            bytes.removeSubrange(start..<end)
            return "delete"
        case 5:
            let other = random.pick(corpus)
            bytes = Array(bytes.prefix(position(in: bytes))) + Array(other.suffix(random.below(other.count + 1)))
            return "splice"
        case 6:
            bytes.insert(contentsOf: Array(random.pick(Self.jsonTokens).utf8), at: position(in: bytes))
            return "token"
        case 7:
            return replaceNumber(&bytes) ? "huge-number" : "huge-number(none)"
        case 8:
            let depth = random.pick([64, 511, 512, 513, 1000, 5000, 100_000])
            let (open, close) = random.chance(50) ? ("[", "]") : ("{\"a\":", "}")
            let balanced = random.chance(70)
            let nest = String(repeating: open, count: depth) + "1" + (balanced ? String(repeating: close, count: depth) : "")
            if let colon = randomIndex(of: UInt8(ascii: ":"), in: bytes) {
                bytes.insert(contentsOf: Array((nest + ",").utf8), at: colon + 1)  // as the start of a value
            } else {
                bytes.insert(contentsOf: Array(nest.utf8), at: position(in: bytes))
            }
            return "nest(\(depth))"
        case 9:
            let text = random.pick([
                String(repeating: "x", count: 100_000), "\\u0000", "\\ud83d", "\\ud83d\\ude00", "\u{1F600}",
                "\\\"", "\\", "\u{202E}evil", "line\nbreak", String(repeating: "\\u00e9", count: 1000),
            ])
            guard let quote = randomIndex(of: UInt8(ascii: "\""), in: bytes) else { return "string(none)" }
            bytes.insert(contentsOf: Array(text.utf8), at: quote + 1)
            return "string"
        default:
            // Swap two keys/words: type confusion and duplicate keys.
            guard let first = randomIndex(of: UInt8(ascii: "\""), in: bytes),
                  let second = randomIndex(of: UInt8(ascii: "\""), in: bytes), first != second else { return "swap(none)" }
            let (a, b) = (min(first, second), max(first, second))
            let wordA = bytes[a..<min(bytes.count, a + 12)]
            bytes.replaceSubrange(b..<min(bytes.count, b + 12), with: wordA)
            return "swap"
        }
    }

    /// Config-file mutations: lines with known keys and hostile values, broken line structure.
    private mutating func lineMutation(_ bytes: inout [UInt8]) -> String {
        var lines = String(decoding: bytes, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
            .map(String.init)
        switch random.below(6) {
        case 0, 1:
            let key = random.chance(90) ? random.pick(StallMonitorConfiguration.keys) : random.pick(Self.junkKeys)
            let value = random.pick(Self.hostileValues)
            let spacing = random.pick([" = ", "=", "  =\t", " =", "= "])
            lines.insert(key + spacing + value, at: random.below(lines.count + 1))
        case 2:
            guard !lines.isEmpty else { break }
            let index = random.below(lines.count)
            lines[index] = lines[index].replacingOccurrences(of: "=", with: random.pick(["", "==", ":", " "]))
        case 3:
            guard !lines.isEmpty else { break }
            let index = random.below(lines.count)
            lines.insert(contentsOf: Array(repeating: lines[index], count: random.between(1...4)), at: index)
        case 4:
            let ending = random.pick(["\r", "\u{2028}", "\u{85}", "\u{0}", "\u{FEFF}", "\u{A0}", "\t"])
            let index = random.below(lines.count + 1)
            if index < lines.count { lines[index] = random.chance(50) ? ending + lines[index] : lines[index] + ending }
        default:
            guard !lines.isEmpty else { break }
            let index = random.below(lines.count)
            if let equals = lines[index].firstIndex(of: "=") {
                lines[index] = String(lines[index][...equals]) + " " + random.pick(Self.hostileValues)
            }
        }
        bytes = Array(lines.joined(separator: "\n").utf8)
        return "line"
    }

    static let junkKeys = ["", "threshold", "THRESHOLD_MS", "report dir", "threshold_ms threshold_ms", "#", "\u{0}",
                           "spool_max_age_hours\u{A0}", "ṯhreshold_ms"]

    static let hostileValues = [
        "", "0", "-0", "-1", "0.5", "1e300", "-1e300", "1e13", "9.3e12", "-9.3e12", "9223372036854775807",
        "-9223372036854775808", "9223372036854775808", "18446744073709551616", "inf", "-inf", "infinity", "nan",
        "NaN", "0x10", "1_000", "  42  ", "\"42\"", "\"", "\"\"", "=", "==", "on", "OFF", "Yes", "maybe", "SIGRTMIN",
        "SIGRTMIN+0", "SIGRTMIN+-1", "SIGRTMIN+9223372036854775807", "SIGRTMIN+30", "SIGRTMIN+31", "SIGRTMAX",
        "sigrtmin+3", "34", "64", "65", "http://", "https://", "http://[::1", "ftp://host", "http://host:99999",
        "https://collector.example:4318/v1/logs", "X-A: b, :c", "Name:", ": value", "a: b, c: d", "Bad Name: x",
        "otlp", "NDJSON", "json", String(repeating: "9", count: 400), String(repeating: "x", count: 10_000),
        "\u{0}", "\u{FEFF}100", "١٢٣", "１００", "100\u{A0}", "1e-400", "0.0000001", "4.9e-324", "1.5e17", "-2e15",
        "100000", "100001", "256", "257", "4095", "4096", "101", "1e20", "5000", "5000.0000001",
    ]

    private mutating func randomIndex(of byte: UInt8, in bytes: [UInt8]) -> Int? {
        guard !bytes.isEmpty else { return nil }
        let start = random.below(bytes.count)
        if let found = bytes[start...].firstIndex(of: byte) { return found }
        return bytes[..<start].firstIndex(of: byte)
    }

    private mutating func replaceNumber(_ bytes: inout [UInt8]) -> Bool {
        let isDigit: (UInt8) -> Bool = { $0 >= 0x30 && $0 <= 0x39 }
        guard !bytes.isEmpty else { return false }
        let start = random.below(bytes.count)
        guard var first = bytes[start...].firstIndex(where: isDigit) ?? bytes[..<start].firstIndex(where: isDigit)
        else { return false }
        while first > 0 && (isDigit(bytes[first - 1]) || bytes[first - 1] == UInt8(ascii: "-")) { first -= 1 }
        var end = first
        while end < bytes.count && (isDigit(bytes[end]) || [0x2E, 0x65, 0x45, 0x2D, 0x2B].contains(bytes[end])) { end += 1 }
        bytes.replaceSubrange(first..<end, with: Array(random.pick(Self.hugeNumbers).utf8))
        return true
    }

    // MARK: Structural edits

    /// A step of a path into a JSON document.
    enum Step {
        case key(String)
        case index(Int)
    }

    /// 1–3 edits of a corpus document, each at a node chosen uniformly among all its nodes (so deep leaves such as
    /// a sample's frame indices are hit as often as top-level fields), serialized once.
    private mutating func structural() -> [UInt8] {
        var document = random.pick(documents)
        for _ in 0..<random.between(1...3) {
            var paths: [[Step]] = []
            Self.collect(document, [], into: &paths)
            let path = random.pick(paths)
            document = editing(document, at: path[...])
        }
        // Leaves are always valid JSON values; only the top level must be a container (isValidJSONObject would
        // check the whole tree and costs as much as the serialization).
        guard document is [String: Any] || document is [Any],
              let data = try? JSONSerialization.data(withJSONObject: document, options: [.sortedKeys])
        else { return random.pick(corpus) }
        return Array(data)
    }

    static func collect(_ node: Any, _ path: [Step], into paths: inout [[Step]]) {
        paths.append(path)
        if let object = node as? [String: Any] {
            // Sorted: dictionary order changes from process to process, and the fuzzer must be deterministic.
            for key in object.keys.sorted() { collect(object[key]!, path + [.key(key)], into: &paths) }
        } else if let array = node as? [Any] {
            for (index, child) in array.enumerated() { collect(child, path + [.index(index)], into: &paths) }
        }
    }

    /// `node` with the node at `path` edited: a container loses, repeats or replaces a child; a leaf is replaced.
    private mutating func editing(_ node: Any, at path: ArraySlice<[Step].Element>) -> Any {
        guard let step = path.first else {
            if let object = node as? [String: Any], !object.isEmpty, random.chance(50) {
                var copy = object
                copy[object.keys.sorted()[random.below(object.count)]] = nil
                return copy
            }
            if let array = node as? [Any], !array.isEmpty, random.chance(50) {
                var copy = array
                let index = random.below(array.count)
                if random.chance(50) {
                    copy.remove(at: index)
                } else {
                    copy.append(contentsOf: Array(repeating: array[index], count: random.between(1...50)))
                }
                return copy
            }
            return replacement(for: node)
        }
        switch step {
        case .key(let key):
            guard var object = node as? [String: Any], let child = object[key] else { return node }
            object[key] = editing(child, at: path.dropFirst())
            return object
        case .index(let index):
            guard var array = node as? [Any], index < array.count else { return node }
            array[index] = editing(array[index], at: path.dropFirst())
            return array
        }
    }

    private mutating func replacement(for node: Any) -> Any {
        switch random.below(14) {
        case 0: return NSNull()
        case 1: return random.chance(50)
        case 2: return -1
        case 3: return Int.min
        case 4: return Int.max
        case 5: return random.pick([1e300, -1e300, 0.5, -0.0, Double.leastNonzeroMagnitude])
        case 6: return ""
        case 7: return [Any]()
        case 8: return [String: Any]()
        case 9: return String(repeating: "é", count: random.pick([1, 300, 70_000]))
        case 10:
            if let number = node as? Int { return random.pick([0 &- number, number &* 1_000_000, number &+ 1, 0 &- number &- 1]) }
            return random.pick(["ok", "timed-out", "pending", "cpu", "starved", "nope", "stallmon.report/0",
                                "stallmon.report/2", "stallmon.report/1x", "stallmon.report/-1"])
        case 11 where (node as? String)?.wholeMatch(of: /\d{4}-\d\d-\d\dT.*/) != nil:
            // A timestamp from another era: a clock reset to 1970, a year typo, the far future.
            let year = random.pick(["0001", "1900", "1969", "1970", "2000", "2554", "2555", "3026", "9999"])
            return year + (node as! String).dropFirst(4)
        default:
            // Digit surgery in strings and numbers: years, hex addresses, versions.
            var text = "\(node)"
            guard let digit = text.indices.filter({ text[$0].isNumber }).randomElement(using: &random) else {
                return text + "0"
            }
            text.replaceSubrange(digit...digit, with: String(random.below(10)))
            if node is String { return text }
            if let integer = Int(text) { return integer }
            if let double = Double(text) { return double }
            return text
        }
    }
}

// MARK: - Known crash bugs

/// Inputs that crashed the process through bugs these fuzzers found, all fixed (see the regression tests below).
/// The fuzzers feed them like any other input (`skip` is false) and count them; `skip = true` would leave them out,
/// for a bug found again, since one trap ends the whole test run.
enum FaultKnownCrashes {
    static let skip = false

    static let millisecondKeys: Set<String> = [
        "threshold_ms", "sample_interval_ms", "interim_after_ms", "capture_timeout_ms", "upload_batch_max_age_ms",
        "upload_timeout_ms", "upload_backoff_ms", "upload_backoff_max_ms", "upload_retry_after_max_ms",
    ]

    /// Why `StallMonitorConfiguration.set(key, to: value)` would trap, or nil. Mirrors the conversions it does.
    static func configTrap(key: String, value: String) -> String? {
        if millisecondKeys.contains(key), let number = Double(value), number.isFinite,
           Int64(exactly: (number * 1_000_000).rounded()) == nil {
            return "ms-overflow"  // Int64(Double) out of range
        }
        if key == "signal" {
            let text = value.trimmingWhitespace().uppercased()
            let rtmin = Int(cstallmon_sigrtmin())
            if text != "SIGRTMIN", text.hasPrefix("SIGRTMIN+"), let offset = Int(text.dropFirst("SIGRTMIN+".count)),
               offset >= 0 {
                return offset > Int.max - rtmin ? "signal-offset-overflow" : nil
            }
            if text != "SIGRTMIN", let number = Int(text), number.subtractingReportingOverflow(rtmin).overflow {
                return "signal-number-overflow"
            }
        }
        if key == "spool_max_age_hours", let hours = Double(value), hours > 0, !(hours * 3600 < 1e20) {
            return "hours-overflow"  // Duration.seconds(Double) out of range
        }
        if key == "upload_token_file", ["/dev", "/proc", "/sys"].contains(where: { value.hasPrefix($0) }) {
            return "unsafe-token-file"  // not a bug: reading a device could block the test
        }
        return nil
    }

    /// Why feeding `report` to the report consumers below would trap, or nil.
    static func reportConsumerTraps(_ report: StallReport) -> [String] {
        var traps: [String] = []
        if report.samples.contains(where: { $0.frames.contains { $0 < 0 } }) { traps.append("negative-frame-index") }
        if let nanoseconds = wallNanosecondsTrap(report.start.wall) { traps.append(nanoseconds) }
        let suppressed = report.suppressedBefore ?? 0
        if suppressed.addingReportingOverflow(suppressed).overflow { traps.append("suppressed-sum-overflow") }
        return traps
    }

    /// The OTLP payload's start time once trapped (`UInt64(milliseconds) * 1_000_000`) for dates before 1970 or after
    /// ~2554; `WallTime.unixNanoseconds` now gives none for them.
    static func wallNanosecondsTrap(_ text: String) -> String? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        guard let date = formatter.date(from: text) else { return nil }
        let milliseconds = (date.timeIntervalSince1970 * 1000).rounded()
        guard milliseconds >= 0, milliseconds < 18_446_744_073_709_551_616.0 else { return "wall-before-1970-or-huge" }
        return UInt64(milliseconds).multipliedReportingOverflow(by: 1_000_000).overflow ? "wall-after-2554" : nil
    }
}

// MARK: - The fuzzers

extension FaultTests {
    /// Seeded random mutation of real reports and config files, fed to the decoder and the config parser/loader
    /// (and decoded reports to the code that consumes them: summary, profile, aggregation, upload payloads). Nothing
    /// may crash; every outcome is a value or a typed error with a description.
    @Suite("Fault: fuzzing the report decoder and the config parser", .serialized)
    struct FaultFuzzTests {
        static let seed: UInt64 = 0x57A1_1F22_2026
        static let reportMutations = 2500
        static let configMutations = 2000
        static let environmentMutations = 1500

        @Test func faultFuzzReportDecoder() throws {
            var mutator = FaultMutator(seed: Self.seed, corpus: FaultCorpus.reports, json: true)
            // The corpus itself decodes.
            for (index, text) in FaultCorpus.reports.enumerated() {
                #expect(throws: Never.self, "corpus report \(index)") {
                    _ = try ReportReader.decode(Data(text.utf8), path: "corpus-\(index).json")
                }
            }
            var decoded = 0
            var reasons: [String: Int] = [:]
            var skipped: [String: Int] = [:]
            var consumed = 0
            let start = faultNow()
            var generating: UInt64 = 0
            var decoding: UInt64 = 0
            for index in 0..<Self.reportMutations {
                let generated = faultNow()
                let (bytes, kinds) = mutator.next()
                let path = "fuzz-\(index).json"
                let report: StallReport
                let decodeStart = faultNow()
                generating += decodeStart - generated
                defer { decoding += faultNow() - decodeStart }
                Self.checkDigestAgreesWithDecode(bytes, path: path, label: "input \(index) \(kinds)")
                do {
                    report = try ReportReader.decode(Data(bytes), path: path)
                } catch {
                    if error.reason.isEmpty || error.description.isEmpty || error.path != path {
                        Issue.record("input \(index) \(kinds): an error without a reason: \(error)")
                    }
                    let reason = error.reason.prefix { $0 != ":" && $0 != "(" }
                    reasons[String(reason), default: 0] += 1
                    continue
                }
                decoded += 1
                // A decoded report survives a round trip unchanged.
                do {
                    let again = try ReportReader.decode(JSONEncoder().encode(report), path: path)
                    #expect(again == report, "input \(index) \(kinds): round trip changed the report")
                } catch {
                    Issue.record("input \(index) \(kinds): a decoded report does not decode again: \(error)")
                }
                let traps = FaultKnownCrashes.reportConsumerTraps(report)
                for trap in traps { skipped[trap, default: 0] += 1 }
                if !traps.isEmpty && FaultKnownCrashes.skip { continue }
                consumed += 1
                Self.consume(report, path: path)
            }
            let seconds = faultMilliseconds(since: start) / 1000
            print("Fault fuzz reports: \(Self.reportMutations) mutations in \(String(format: "%.1f", seconds)) s "
                + "(generating \(generating / 1_000_000) ms, decoding and consuming \(decoding / 1_000_000) ms); "
                + "\(decoded) decoded (\(consumed) also fed to summary/profile/aggregation/upload), rejected: "
                + reasons.sorted { $0.value > $1.value }.map { "\($0.key.trimmingWhitespace()) \($0.value)" }
                    .joined(separator: ", ")
                + "; \(FaultKnownCrashes.skip ? "known crash inputs not fed" : "inputs of fixed crashes (fed)"): \(skipped)")
            #expect(decoded > 100 && decoded < Self.reportMutations, "the mutations reach both outcomes")
        }

        /// `stallmon report` reads digests, skimming what it does not need: whatever `decode` accepts, the digest
        /// accepts with the same values; whatever both refuse, they refuse for the same reason; and the skimmer
        /// agrees with Foundation's JSONSerialization on what is JSON at all, but for the documented differences. (The digest may accept a report that
        /// `decode` refuses for a bad value in a member the summary does not read, such as a sample.)
        static func checkDigestAgreesWithDecode(_ bytes: [UInt8], path: String, label: String) {
            let full = Result { () throws(ReportReadError) -> StallReport in
                try ReportReader.decode(Data(bytes), path: path)
            }
            let digest = Result { () throws(ReportReadError) -> StallDigest in
                try ReportReader.decodeDigest(Data(bytes), path: path)
            }
            switch (full, digest) {
            case (.success(let report), .success(let digest)):
                #expect(digest == StallDigest(report), "\(label): the digest differs from the report")
            case (.success, .failure(let error)):
                Issue.record("\(label): decode accepts, the digest refuses: \(error)")
            case (.failure(let error), .failure(let digestError)):
                #expect(digestError == error, "\(label): refused for different reasons")
            case (.failure, .success):
                break
            }
            #expect(JSONOracle.disagreementWithFoundation(bytes) == nil, "\(label)")
        }

        /// What `stallmon report`, `report --folded/--html`, `symbolicate` and the uploader do with a report read
        /// from disk.
        static func consume(_ report: StallReport, path: String) {
            let summary = StallSummary(directory: "/fuzz", reports: [(path, report), (path + "2", report)], unreadable: 1)
            #expect(summary.stalls == 2)
            _ = StallProfile.folded([report])
            _ = StallProfile.flameTree([report])
            _ = StallAggregation.analyze(frames: report.frames, samples: report.samples)
            _ = StackText.mostCommonStack(report)
            for format in UploadFormat.allCases {
                #expect(throws: Never.self) {
                    _ = try UploadPayload.encode([report], format: format, serviceName: nil, observedAt: 1)
                }
            }
        }

        @Test func faultFuzzConfigParserAndLoader() throws {
            var mutator = FaultMutator(seed: Self.seed ^ 0xC0F1, corpus: FaultCorpus.configs, json: false)
            let directory = makeTemporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let path = directory + "/fuzz.conf"
            // The corpus itself loads.
            for (index, text) in FaultCorpus.configs.enumerated() {
                try text.write(toFile: path, atomically: false, encoding: .utf8)
                #expect(throws: Never.self, "corpus config \(index)") {
                    _ = try StallMonitorConfiguration.load(file: path, environment: [:])
                }
            }
            var parsed = 0
            var loaded = 0
            var skipped: [String: Int] = [:]
            var errors = 0
            for index in 0..<Self.configMutations {
                let (bytes, kinds) = mutator.next(lineMutations: true)
                let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
                let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                close(fd)
                guard fd >= 0, written == bytes.count else {
                    Issue.record("cannot write \(path)")
                    return
                }
                // Parse what load will parse: the file as String(contentsOfFile:) reads it.
                let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? String(decoding: bytes, as: UTF8.self)
                let lineCount = text.split(separator: "\n", omittingEmptySubsequences: false).count
                var traps: [String] = []
                do {
                    let entries = try StallMonitorConfiguration.parse(text, source: path)
                    parsed += 1
                    for (key, value, line) in entries {
                        // Plain checks in the hot loops (an #expect per entry costs more than the parse).
                        if !StallMonitorConfiguration.keys.contains(key) || !(1...lineCount).contains(line) {
                            Issue.record("input \(index) \(kinds): entry \(key) at line \(line) of \(lineCount)")
                        }
                        if let trap = FaultKnownCrashes.configTrap(key: key, value: value) { traps.append(trap) }
                    }
                } catch {
                    if error.description.isEmpty || !error.description.hasPrefix(path) {
                        Issue.record("input \(index) \(kinds): parse errors name the file: \(error.description)")
                    }
                }
                for trap in traps { skipped[trap, default: 0] += 1 }
                if !traps.isEmpty && FaultKnownCrashes.skip { continue }
                do {
                    let configuration = try StallMonitorConfiguration.load(file: path, environment: [:])
                    loaded += 1
                    #expect(throws: Never.self, "input \(index) \(kinds): a loaded configuration is valid") {
                        try configuration.validate()
                    }
                } catch {
                    errors += 1
                    #expect(!error.description.isEmpty, "input \(index) \(kinds)")
                }
            }
            print("Fault fuzz config files: \(Self.configMutations) mutations; \(parsed) parsed, \(loaded) loaded, "
                + "\(errors) load errors; \(FaultKnownCrashes.skip ? "known crash inputs not fed" : "inputs of fixed crashes (fed)"): \(skipped)")
            #expect(loaded > 50 && errors > 50, "the mutations reach both outcomes")
        }

        @Test func faultFuzzConfigEnvironment() throws {
            var random = SeededRandom(seed: Self.seed ^ 0xE4F1)
            var loaded = 0
            var errors = 0
            var skipped: [String: Int] = [:]
            for index in 0..<Self.environmentMutations {
                var environment: [String: String] = [:]
                var traps: [String] = []
                for _ in 0..<random.between(1...3) {
                    let key = random.chance(92) ? random.pick(StallMonitorConfiguration.keys)
                        : random.pick(FaultMutator.junkKeys)
                    var value = random.pick(FaultMutator.hostileValues)
                    if random.chance(30) {  // a mutated plausible value
                        var bytes = Array(random.pick(["100", "10", "SIGRTMIN+3", "on", "http://h:1", "0.25"]).utf8)
                        bytes[random.below(bytes.count)] = random.pick(FaultMutator.interestingBytes)
                        value = String(decoding: bytes, as: UTF8.self)
                    }
                    environment["STALLMON_" + key.uppercased()] = value
                }
                if random.chance(5) { environment["STALLMON_CONFIG"] = "/nonexistent/ignored-by-load" }
                if random.chance(5) { environment["UNRELATED"] = "1e300" }
                for (name, value) in environment where name.hasPrefix("STALLMON_") {
                    let key = String(name.dropFirst("STALLMON_".count)).lowercased()  // as load() maps names
                    if let trap = FaultKnownCrashes.configTrap(key: key, value: value) { traps.append(trap) }
                }
                for trap in traps { skipped[trap, default: 0] += 1 }
                if !traps.isEmpty && FaultKnownCrashes.skip { continue }
                do {
                    let configuration = try StallMonitorConfiguration.load(file: nil, environment: environment)
                    loaded += 1
                    #expect(throws: Never.self, "input \(index): a loaded configuration is valid") {
                        try configuration.validate()
                    }
                } catch {
                    errors += 1
                    #expect(!error.description.isEmpty, "input \(index) \(environment.keys.sorted())")
                    #expect(error.description.contains("environment STALLMON_") || error.description.contains("invalid")
                        || error.description.contains("unknown environment variable") || error.description.contains("upload"),
                            "environment errors say what is wrong: \(error.description.prefix(200))")
                }
            }
            print("Fault fuzz config environment: \(Self.environmentMutations) mutations; \(loaded) loaded, "
                + "\(errors) errors; \(FaultKnownCrashes.skip ? "known crash inputs not fed" : "inputs of fixed crashes (fed)"): \(skipped)")
            #expect(loaded > 20 && errors > 20, "the mutations reach both outcomes")
        }
    }

    /// Minimized inputs of the crashes the fuzzers found, kept as regression tests. Each asserts the correct
    /// behaviour (a typed error, or a value handled without trapping); all run (the bugs are fixed).
    @Suite("Fault: fuzz crash regressions", .serialized)
    struct FaultFuzzRegressionTests {
        static func load(_ text: String) -> Result<StallMonitorConfiguration, ConfigurationError> {
            let directory = makeTemporaryDirectory("faultRegression")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let path = directory + "/stallmon.conf"
            try? text.write(toFile: path, atomically: false, encoding: .utf8)
            return Result { () throws(ConfigurationError) in
                try StallMonitorConfiguration.load(file: path, environment: [:])
            }
        }

        @Test
        func faultHugeMillisecondsAreAConfigurationError() {
            for text in ["threshold_ms = 1e13", "capture_timeout_ms = 9.3e12", "upload_timeout_ms = -1e17"] {
                guard case .failure(let error) = Self.load(text) else {
                    Issue.record("\(text) was accepted")
                    continue
                }
                #expect(error.description.contains("invalid"), "\(error.description)")
            }
            #expect(throws: ConfigurationError.self) {
                try StallMonitorConfiguration.load(file: nil, environment: ["STALLMON_THRESHOLD_MS": "1e300"])
            }
        }

        @Test
        func faultHugeSignalNumbersAreAConfigurationError() {
            for text in ["signal = -9223372036854775808", "signal = SIGRTMIN+9223372036854775807"] {
                guard case .failure(let error) = Self.load(text) else {
                    Issue.record("\(text) was accepted")
                    continue
                }
                #expect(error.description.contains("signal"), "\(error.description)")
            }
            #expect(throws: ConfigurationError.self) { try SamplingSignal(parsing: "SIGRTMIN+9223372036854775807") }
            #expect(throws: ConfigurationError.self) {
                try SamplingSignal(offsetFromRTMin: Int.max).resolve()
            }
        }

        @Test
        func faultHugeSpoolAgeIsAConfigurationError() {
            for text in ["spool_max_age_hours = inf", "spool_max_age_hours = 1e300"] {
                guard case .failure(let error) = Self.load(text) else {
                    Issue.record("\(text) was accepted")
                    continue
                }
                #expect(error.description.contains("spool_max_age_hours"), "\(error.description)")
            }
        }

        static func report(_ edit: (inout StallReport) -> Void) throws -> StallReport {
            var report = try ReportReader.decode(Data(FaultCorpus.reportCPU.utf8), path: "corpus")
            edit(&report)
            // Through bytes, as it comes from a file.
            return try ReportReader.decode(JSONEncoder().encode(report), path: "regression.json")
        }

        @Test
        func faultNegativeFrameIndexIsIgnoredByConsumers() throws {
            let report = try Self.report { report in
                for index in report.samples.indices { report.samples[index].frames[0] = -1 }
            }
            _ = StallProfile.folded([report])
            _ = StallAggregation.analyze(frames: report.frames, samples: report.samples)
            let stack = StackText.mostCommonStack(report)
            #expect(!stack.isEmpty)
            #expect(throws: Never.self) {
                _ = try UploadPayload.encode([report], format: .otlp, serviceName: nil, observedAt: 1)
            }
        }

        @Test
        func faultOutOfRangeStartTimeDoesNotCrashTheUploadPayload() throws {
            for wall in ["1969-12-31T23:59:59.000Z", "3026-11-22T02:57:55.985Z"] {
                let report = try Self.report { $0.start.wall = wall }
                #expect(throws: Never.self) {
                    _ = try UploadPayload.encode([report], format: .otlp, serviceName: nil, observedAt: 7)
                }
            }
        }

        @Test
        func faultHugeSuppressedCountsDoNotCrashTheSummary() throws {
            let report = try Self.report { $0.suppressedBefore = Int.max }
            let summary = StallSummary(directory: "/d", reports: [("a", report), ("b", report)], unreadable: 0)
            #expect(summary.suppressed >= 0)
        }
    }
}
