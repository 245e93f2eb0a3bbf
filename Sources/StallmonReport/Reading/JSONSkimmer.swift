/// Checks a whole JSON document's syntax without building any values, and hands back the byte ranges of the
/// top-level object's members. `stallmon report` reads 100,000 reports for a summary that needs a twentieth of each:
/// Foundation's JSONDecoder has no way to skip a member, so it builds a map of every sample, frame and image first
/// (most of the time of a summary). The skimmer validates the whole document once; `SkimmedJSONDecoder` then
/// decodes only the members asked for, in place, and leaves to Foundation's JSONDecoder what it cannot decode
/// exactly as Foundation would.
///
/// Validation is RFC 8259's grammar: strings (escapes, no control characters, well-formed UTF-8, UTF-16 surrogates
/// in pairs), numbers, literals, nesting (at most `maximumDepth`, as Foundation), and nothing after the document
/// but whitespace. Where it differs from Foundation's JSON parser, `ReportReader` falls back to Foundation's
/// decoder, so a report is never refused that `decode` accepts: Foundation also accepts a trailing comma
/// (`[1,]`), and refuses numbers beyond Double's range, which are valid JSON but have no value.
enum JSONSkimmer {
    /// Foundation's JSON nesting limit.
    static let maximumDepth = 512

    struct SyntaxError: Error, Equatable {
        /// Byte offset where the document stopped being JSON.
        let offset: Int
    }

    /// A top-level member: the key's raw bytes (between the quotes, escapes untouched) and the value's bytes.
    struct Member {
        let key: Range<Int>
        let value: Range<Int>
    }

    /// Validates `bytes` and returns the members of its top-level object, or nil when the document is valid JSON
    /// but not an object.
    static func topLevelMembers(_ bytes: UnsafeRawBufferPointer) throws(SyntaxError) -> [Member]? {
        try withUnsafeTemporaryAllocation(of: UInt8.self, capacity: maximumDepth) { open throws(SyntaxError) in
            try topLevelMembers(bytes, open: open.baseAddress!)
        }
    }

    private static func topLevelMembers(_ bytes: UnsafeRawBufferPointer, open: UnsafeMutablePointer<UInt8>)
        throws(SyntaxError) -> [Member]?
    {
        var scanner = Scanner(bytes: bytes, open: open)
        scanner.skipWhitespace()
        guard scanner.peek() == UInt8(ascii: "{") else {
            try scanner.skipValue()
            try scanner.expectEnd()
            return nil
        }
        scanner.index += 1
        var members: [Member] = []
        scanner.skipWhitespace()
        if scanner.peek() == UInt8(ascii: "}") {
            scanner.index += 1
            try scanner.expectEnd()
            return members
        }
        while true {
            scanner.skipWhitespace()
            guard scanner.peek() == UInt8(ascii: "\"") else { throw scanner.error() }
            let keyStart = scanner.index + 1
            try scanner.skipString()
            let key = keyStart..<(scanner.index - 1)
            scanner.skipWhitespace()
            guard scanner.peek() == UInt8(ascii: ":") else { throw scanner.error() }
            scanner.index += 1
            scanner.skipWhitespace()
            let valueStart = scanner.index
            try scanner.skipValue()
            members.append(Member(key: key, value: valueStart..<scanner.index))
            scanner.skipWhitespace()
            switch scanner.peek() {
            case UInt8(ascii: ","): scanner.index += 1
            case UInt8(ascii: "}"):
                scanner.index += 1
                try scanner.expectEnd()
                return members
            default: throw scanner.error()
            }
        }
    }

    /// Validates `bytes` as one JSON document.
    static func validate(_ bytes: UnsafeRawBufferPointer) throws(SyntaxError) {
        try withUnsafeTemporaryAllocation(of: UInt8.self, capacity: maximumDepth) { open throws(SyntaxError) in
            var scanner = Scanner(bytes: bytes, open: open.baseAddress!)
            scanner.skipWhitespace()
            try scanner.skipValue()
            try scanner.expectEnd()
        }
    }

    /// Walks JSON bytes; `SkimmedJSONDecoder` uses it to find members and elements in a validated document.
    struct Scanner {
        let bytes: UnsafeRawBufferPointer
        var index = 0
        /// "{" or "[" of each container entered, `maximumDepth` of them at most.
        let open: UnsafeMutablePointer<UInt8>

        init(bytes: UnsafeRawBufferPointer, index: Int = 0, open: UnsafeMutablePointer<UInt8>) {
            self.bytes = bytes
            self.index = index
            self.open = open
        }

        /// The index of the first byte from here on that is not whitespace.
        func afterWhitespace() -> Int {
            var scanner = self
            scanner.skipWhitespace()
            return scanner.index
        }

        @inline(__always)
        func peek() -> UInt8? {
            index < bytes.count ? bytes[index] : nil
        }

        func error() -> SyntaxError {
            SyntaxError(offset: index)
        }

        @inline(__always)
        mutating func skipWhitespace() {
            while index < bytes.count {
                let byte = bytes[index]
                guard byte <= 0x20 else { return }
                switch byte {
                case 0x20, 0x0A, 0x0D, 0x09:
                    index += 1
                    // Pretty-printed indentation comes in runs of spaces: skip up to eight at once.
                    if index + 8 <= bytes.count {
                        let notSpace = bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self)
                            ^ 0x2020_2020_2020_2020
                        index += notSpace.trailingZeroBitCount / 8  // little-endian: the lowest byte is first
                    }
                default: return
                }
            }
        }

        mutating func expectEnd() throws(SyntaxError) {
            skipWhitespace()
            guard index == bytes.count else { throw error() }
        }

        /// One value of any kind. Containers are walked with an explicit stack of open brackets, so a deeply
        /// nested document cannot exhaust the thread's stack.
        mutating func skipValue() throws(SyntaxError) {
            var depth = 0
            while true {
                // A value starts here.
                skipWhitespace()
                guard let byte = peek() else { throw error() }
                switch byte {
                case UInt8(ascii: "{"), UInt8(ascii: "["):
                    guard depth < JSONSkimmer.maximumDepth else { throw error() }
                    open[depth] = byte
                    depth += 1
                    index += 1
                    skipWhitespace()
                    if byte == UInt8(ascii: "{") {
                        if peek() == UInt8(ascii: "}") {
                            index += 1
                            depth -= 1
                            break
                        }
                        try skipKeyAndColon()
                    } else if peek() == UInt8(ascii: "]") {
                        index += 1
                        depth -= 1
                        break
                    }
                    continue  // the first element or member value
                case UInt8(ascii: "\""): try skipString()
                case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): try skipNumber()
                case UInt8(ascii: "t"): try skipLiteral("true")
                case UInt8(ascii: "f"): try skipLiteral("false")
                case UInt8(ascii: "n"): try skipLiteral("null")
                default: throw error()
                }
                // A value ended: close containers until one continues with a comma.
                while depth > 0 {
                    let container = open[depth - 1]
                    skipWhitespace()
                    guard let next = peek() else { throw error() }
                    let close = container == UInt8(ascii: "{") ? UInt8(ascii: "}") : UInt8(ascii: "]")
                    if next == close {
                        index += 1
                        depth -= 1
                        continue
                    }
                    guard next == UInt8(ascii: ",") else { throw error() }
                    index += 1
                    if container == UInt8(ascii: "{") {
                        skipWhitespace()
                        try skipKeyAndColon()
                    }
                    break
                }
                if depth == 0 { return }
            }
        }

        private mutating func skipKeyAndColon() throws(SyntaxError) {
            guard peek() == UInt8(ascii: "\"") else { throw error() }
            try skipString()
            skipWhitespace()
            guard peek() == UInt8(ascii: ":") else { throw error() }
            index += 1
        }

        /// A string, from its opening quote to just past its closing one.
        mutating func skipString() throws(SyntaxError) {
            index += 1  // the opening quote
            while index < bytes.count {
                // Plain bytes (no quote, backslash, control character or non-ASCII byte) eight at a time.
                if index + 8 <= bytes.count {
                    let plain = Self.plainBytes(bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self))
                    index += plain
                    if plain == 8 { continue }
                }
                let byte = bytes[index]
                if byte == UInt8(ascii: "\"") {
                    index += 1
                    return
                }
                if byte == UInt8(ascii: "\\") {
                    index += 1
                    guard let escaped = peek() else { throw error() }
                    switch escaped {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"),
                         UInt8(ascii: "f"), UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                        index += 1
                    case UInt8(ascii: "u"):
                        index += 1
                        let unit = try hexQuad()
                        // UTF-16 surrogates come in pairs, as Foundation insists.
                        if (0xDC00...0xDFFF).contains(unit) { throw SyntaxError(offset: index - 6) }
                        if (0xD800...0xDBFF).contains(unit) {
                            guard index + 2 <= bytes.count, bytes[index] == UInt8(ascii: "\\"),
                                  bytes[index + 1] == UInt8(ascii: "u") else { throw error() }
                            index += 2
                            guard (0xDC00...0xDFFF).contains(try hexQuad()) else { throw SyntaxError(offset: index - 6) }
                        }
                    default: throw error()
                    }
                } else if byte < 0x20 {
                    throw error()
                } else if byte < 0x80 {
                    index += 1
                } else {
                    try skipUTF8Sequence(lead: byte)
                }
            }
            throw error()  // unterminated
        }

        /// The four hex digits of a `\\u` escape, as a UTF-16 code unit.
        private mutating func hexQuad() throws(SyntaxError) -> UInt16 {
            var unit: UInt16 = 0
            for _ in 0..<4 {
                guard let digit = peek(), Self.isHexDigit(digit) else { throw error() }
                unit = unit << 4 | UInt16(Self.isDigit(digit) ? digit - UInt8(ascii: "0") : (digit | 0x20) - UInt8(ascii: "a") + 10)
                index += 1
            }
            return unit
        }

        /// One well-formed multi-byte UTF-8 sequence (Unicode Table 3-7: no overlong forms, no surrogates, nothing
        /// above U+10FFFF).
        private mutating func skipUTF8Sequence(lead: UInt8) throws(SyntaxError) {
            let length: Int
            var secondRange: ClosedRange<UInt8> = 0x80...0xBF
            switch lead {
            case 0xC2...0xDF: length = 2
            case 0xE0: length = 3; secondRange = 0xA0...0xBF
            case 0xE1...0xEC, 0xEE...0xEF: length = 3
            case 0xED: length = 3; secondRange = 0x80...0x9F
            case 0xF0: length = 4; secondRange = 0x90...0xBF
            case 0xF1...0xF3: length = 4
            case 0xF4: length = 4; secondRange = 0x80...0x8F
            default: throw error()
            }
            guard index + length <= bytes.count, secondRange.contains(bytes[index + 1]) else { throw error() }
            for offset in 2..<length where !(0x80...0xBF).contains(bytes[index + offset]) {
                throw SyntaxError(offset: index + offset)
            }
            index += length
        }

        /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
        mutating func skipNumber() throws(SyntaxError) {
            if peek() == UInt8(ascii: "-") { index += 1 }
            guard let first = peek(), Self.isDigit(first) else { throw error() }
            index += 1
            if first != UInt8(ascii: "0") { skipDigits() }
            if peek() == UInt8(ascii: ".") {
                index += 1
                guard let digit = peek(), Self.isDigit(digit) else { throw error() }
                skipDigits()
            }
            if peek() == UInt8(ascii: "e") || peek() == UInt8(ascii: "E") {
                index += 1
                if peek() == UInt8(ascii: "+") || peek() == UInt8(ascii: "-") { index += 1 }
                guard let digit = peek(), Self.isDigit(digit) else { throw error() }
                skipDigits()
            }
        }

        private mutating func skipDigits() {
            while let byte = peek(), Self.isDigit(byte) { index += 1 }
        }

        mutating func skipLiteral(_ literal: StaticString) throws(SyntaxError) {
            let length = literal.utf8CodeUnitCount
            guard index + length <= bytes.count else { throw error() }
            let expected = UnsafeRawBufferPointer(start: literal.utf8Start, count: length)
            for offset in 0..<length where bytes[index + offset] != expected[offset] {
                throw SyntaxError(offset: index + offset)
            }
            index += length
        }

        /// How many of the eight bytes (lowest first) come before the first `"`, `\`, byte below 0x20 or byte above
        /// 0x7F. The SWAR "has zero byte" and "has byte less than" tests of Bit Twiddling Hacks: their borrows only
        /// flag bytes above a true match, so the lowest flag is exact.
        @inline(__always)
        static func plainBytes(_ word: UInt64) -> Int {
            let ones: UInt64 = 0x0101_0101_0101_0101
            let quote = word ^ 0x2222_2222_2222_2222
            let backslash = word ^ 0x5C5C_5C5C_5C5C_5C5C
            let special = ((quote &- ones) & ~quote) | ((backslash &- ones) & ~backslash)
                | ((word &- 0x2020_2020_2020_2020) & ~word) | word
            return (special & 0x8080_8080_8080_8080).trailingZeroBitCount / 8
        }

        static func isDigit(_ byte: UInt8) -> Bool {
            byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
        }

        static func isHexDigit(_ byte: UInt8) -> Bool {
            isDigit(byte) || (byte | 0x20 >= UInt8(ascii: "a") && byte | 0x20 <= UInt8(ascii: "f"))
        }
    }
}
