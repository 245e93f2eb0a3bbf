import Foundation

/// A `Decoder` over a document `JSONSkimmer` has already validated, for the plain JSON stallmon writes: reading a
/// report's samples and frames with Foundation's JSONDecoder was 62 % of a 100,000-report pprof export, most of it
/// the runtime instantiating generic metadata under a lock, on both cores at once. This decoder reads values in
/// place, finding members and elements with the skimmer's scanner; nothing is copied but the strings it returns.
///
/// It decodes only what it can decode exactly as Foundation would, and throws `Unsupported` for everything else,
/// so that its caller decodes the same bytes with Foundation's JSONDecoder, whose value or error stands:
/// - a member named twice in one object (which one Foundation keeps is its own business);
/// - an integer written with a fraction or an exponent (`1.0`, `1e2`), or beyond its type's range;
/// - a number beyond Double's range (Foundation refuses it);
/// - a missing member, a null or a value of the wrong kind where the type needs one (Foundation names the error);
/// - types Foundation's JSONDecoder treats specially (`Date`, `Data`, `URL`, `Decimal`), `Float`, `superDecoder`.
///
/// Not thread-safe: one decoder per document and thread. The bytes must outlive the decoding.
package struct SkimmedJSONDecoder {
    /// The document holds something this decoder leaves to Foundation's.
    package struct Unsupported: Error {
        package init() {}
    }

    /// Decodes a `T` from the value at `start` of `bytes`, a document `JSONSkimmer` validated. `topLevel`, when
    /// given, are the members of the object at `start` as the skimmer found them (so they are not scanned twice).
    static func decode<T: Decodable>(
        _ type: T.Type, from bytes: UnsafeRawBufferPointer, at start: Int = 0, topLevel: [JSONSkimmer.Member]? = nil
    ) throws -> T {
        try withUnsafeTemporaryAllocation(of: UInt8.self, capacity: JSONSkimmer.maximumDepth) { open in
            let impl = Impl(bytes: bytes, open: open.baseAddress!)
            impl.position = JSONSkimmer.Scanner(bytes: bytes, index: start, open: open.baseAddress!)
                .afterWhitespace()
            if let topLevel {
                impl.root = (impl.position, topLevel.map { Member(key: $0.key, value: $0.value.lowerBound) })
            }
            let value = try impl.decodeValue(T.self)
            // A question that cannot throw (`contains`, `allKeys`) met what only Foundation may answer.
            if impl.leftToFoundation { throw Unsupported() }
            return value
        }
    }

    /// A member of an object: its key's bytes (between the quotes) and where its value starts.
    fileprivate struct Member {
        let key: Range<Int>
        let value: Int
    }

    fileprivate final class Impl: Decoder, SingleValueDecodingContainer {
        let bytes: UnsafeRawBufferPointer
        /// The scanner's stack of open brackets.
        let open: UnsafeMutablePointer<UInt8>
        /// Where the value being decoded starts (after any whitespace).
        var position = 0
        /// The members of the top-level object, and of the last other object scanned: `Entry(from:)` and the subsets
        /// built on it open the top level two or three times, and it is a report's whole size.
        var root: (start: Int, members: [Member])?
        var last: (start: Int, members: [Member])?
        /// Set when `contains` or `allKeys`, which cannot throw, met a repeated key: the value decoded
        /// may differ from Foundation's, so `decode` throws `Unsupported` at the end.
        var leftToFoundation = false
        /// Where the last object read member by member (`Object.forEachMember`) began and ended (just past its
        /// closing brace): an array of them moves on from there instead of walking the object again.
        var lastObject: (start: Int, end: Int)?

        init(bytes: UnsafeRawBufferPointer, open: UnsafeMutablePointer<UInt8>) {
            self.bytes = bytes
            self.open = open
        }

        var codingPath: [any CodingKey] { [] }
        var userInfo: [CodingUserInfoKey: Any] { [:] }

        func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
            KeyedDecodingContainer(KeyedContainer<Key>(impl: self, members: try members(at: position)))
        }

        func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
            try UnkeyedContainer(impl: self, start: position)
        }

        func singleValueContainer() throws -> any SingleValueDecodingContainer { self }

        // MARK: Values

        func scanner(at index: Int) -> JSONSkimmer.Scanner {
            JSONSkimmer.Scanner(bytes: bytes, index: index, open: open)
        }

        /// Decodes a `T` at `start`, then puts the position back (containers hold their own places).
        func decodeValue<T: Decodable>(_ type: T.Type, at start: Int) throws -> T {
            let saved = position
            position = start
            defer { position = saved }
            return try decodeValue(type)
        }

        /// Decodes a `T` at `position`: the primitives directly, other types through their `init(from:)`.
        func decodeValue<T: Decodable>(_ type: T.Type) throws -> T {
            if T.self == String.self { return try string(at: position) as! T }
            if T.self == Int.self { return try integer(Int.self, at: position) as! T }
            if T.self == Double.self { return try double(at: position) as! T }
            if T.self == Bool.self { return try bool(at: position) as! T }
            if T.self == UInt64.self { return try integer(UInt64.self, at: position) as! T }
            // What Foundation's JSONDecoder decodes its own way (or may, with a strategy) is left to it.
            if T.self == Date.self || T.self == Data.self || T.self == URL.self || T.self == Decimal.self
                || T.self == Float.self {
                throw Unsupported()
            }
            if let skimmed = T.self as? any SkimmedDecodable.Type {
                return try skimmed.init(skimming: Object(impl: self, start: position)) as! T
            }
            return try T(from: self)
        }

        func isNull(at index: Int) -> Bool {
            bytes[index] == UInt8(ascii: "n")
        }

        func string(at index: Int) throws -> String {
            guard bytes[index] == UInt8(ascii: "\"") else { throw Unsupported() }
            return text(of: (index + 1)..<(stringEnd(from: index) - 1))
        }

        /// Just past the closing quote of the string at `index`.
        func stringEnd(from index: Int) -> Int {
            var cursor = index + 1
            while true {
                switch bytes[cursor] {
                case UInt8(ascii: "\""): return cursor + 1
                case UInt8(ascii: "\\"): cursor += 2  // the escaped character is never the closing quote
                default: cursor += 1
                }
            }
        }

        /// Whether a key's bytes must be read as text to be compared as Foundation compares keys (as Swift strings,
        /// by canonical equivalence: `"\\u212A"`, the Kelvin sign, is the key `K`): with an escape or a byte beyond
        /// ASCII. Plain ASCII keys are equal exactly when their bytes are.
        func needsText(_ key: UnsafeRawBufferPointer) -> Bool {
            key.contains { $0 == UInt8(ascii: "\\") || $0 >= 0x80 }
        }

        /// The text of a string's contents (between its quotes), escapes resolved. The skimmer checked them: every
        /// `\\u` has four hex digits, and surrogates come in pairs.
        func text(of range: Range<Int>) -> String {
            let raw = UnsafeRawBufferPointer(rebasing: bytes[range])
            guard raw.contains(UInt8(ascii: "\\")) else { return String(decoding: raw, as: UTF8.self) }
            var utf8: [UInt8] = []
            utf8.reserveCapacity(raw.count)
            var cursor = 0
            while cursor < raw.count {
                let byte = raw[cursor]
                guard byte == UInt8(ascii: "\\") else {
                    utf8.append(byte)
                    cursor += 1
                    continue
                }
                let escaped = raw[cursor + 1]
                cursor += 2
                switch escaped {
                case UInt8(ascii: "b"): utf8.append(0x08)
                case UInt8(ascii: "f"): utf8.append(0x0C)
                case UInt8(ascii: "n"): utf8.append(0x0A)
                case UInt8(ascii: "r"): utf8.append(0x0D)
                case UInt8(ascii: "t"): utf8.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = UInt32(hexQuad(raw, at: cursor))
                    cursor += 4
                    if (0xD800...0xDBFF).contains(scalar) {
                        let low = UInt32(hexQuad(raw, at: cursor + 2))
                        cursor += 6
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    }
                    // Always a scalar in a validated document; U+FFFD rather than a trap otherwise.
                    utf8.append(contentsOf: String(Character(Unicode.Scalar(scalar) ?? "\u{FFFD}")).utf8)
                default: utf8.append(escaped)  // " \\ /
                }
            }
            return String(decoding: utf8, as: UTF8.self)
        }

        private func hexQuad(_ raw: UnsafeRawBufferPointer, at index: Int) -> UInt16 {
            var unit: UInt16 = 0
            for digit in raw[index..<(index + 4)] {
                unit = unit << 4 | UInt16(JSONSkimmer.Scanner.isDigit(digit) ? digit - UInt8(ascii: "0")
                                          : (digit | 0x20) - UInt8(ascii: "a") + 10)
            }
            return unit
        }

        func bool(at index: Int) throws -> Bool {
            switch bytes[index] {
            case UInt8(ascii: "t"): return true
            case UInt8(ascii: "f"): return false
            default: throw Unsupported()
            }
        }

        /// An integer written as one (`-?[0-9]+`), in range of `I`.
        package func integer<I: FixedWidthInteger>(_ type: I.Type, at index: Int) throws -> I {
            var cursor = index
            let negative = bytes[cursor] == UInt8(ascii: "-")
            if negative { cursor += 1 }
            var value: I = 0
            let first = cursor
            while cursor < bytes.count, JSONSkimmer.Scanner.isDigit(bytes[cursor]) {
                let digit = I(bytes[cursor] &- UInt8(ascii: "0"))
                let (shifted, overflowShift) = value.multipliedReportingOverflow(by: 10)
                let (next, overflowAdd) = negative ? shifted.subtractingReportingOverflow(digit)
                    : shifted.addingReportingOverflow(digit)
                guard !overflowShift, !overflowAdd else { throw Unsupported() }
                value = next
                cursor += 1
            }
            guard cursor > first else { throw Unsupported() }
            if cursor < bytes.count {
                switch bytes[cursor] {
                case UInt8(ascii: "."), UInt8(ascii: "e"), UInt8(ascii: "E"): throw Unsupported()
                default: break
                }
            }
            return value
        }

        func double(at index: Int) throws -> Double {
            let byte = bytes[index]
            guard byte == UInt8(ascii: "-") || JSONSkimmer.Scanner.isDigit(byte) else { throw Unsupported() }
            var scanner = scanner(at: index)
            try scanner.skipNumber()
            // Swift's parser rounds correctly, in any locale, as Foundation's does.
            guard let value = Double(String(decoding: UnsafeRawBufferPointer(rebasing: bytes[index..<scanner.index]),
                                            as: UTF8.self)),
                  value.isFinite else { throw Unsupported() }
            // A number so small it reads as zero: whether Foundation takes it as 0 is its own business.
            if value == 0, bytes[index..<scanner.index].contains(where: { (UInt8(ascii: "1")...UInt8(ascii: "9")).contains($0) }) {
                throw Unsupported()
            }
            return value
        }

        /// The members of the object at `index`.
        func members(at index: Int) throws -> [Member] {
            if let root, root.start == index { return root.members }
            if let last, last.start == index { return last.members }
            var members: [Member] = []
            members.reserveCapacity(16)
            _ = try forEachMember(ofObjectAt: index) { key, value in members.append(Member(key: key, value: value)) }
            if root == nil { root = (index, members) } else { last = (index, members) }
            return members
        }

        /// Walks the members of the object at `index` (its `{`) in a validated document: `body` gets each key's
        /// bytes (between its quotes) and where its value starts. Returns the index just past the closing brace.
        func forEachMember(ofObjectAt index: Int, _ body: (Range<Int>, Int) throws -> Void) throws -> Int {
            guard bytes[index] == UInt8(ascii: "{") else { throw Unsupported() }
            var scanner = scanner(at: index + 1)
            scanner.skipWhitespace()
            guard bytes[scanner.index] != UInt8(ascii: "}") else { return scanner.index + 1 }
            while true {
                let keyStart = scanner.index
                let keyEnd = stringEnd(from: keyStart)
                scanner.index = keyEnd
                scanner.skipWhitespace()
                scanner.index += 1  // the colon
                scanner.skipWhitespace()
                try body((keyStart + 1)..<(keyEnd - 1), scanner.index)
                try scanner.skipValue()
                scanner.skipWhitespace()
                guard bytes[scanner.index] == UInt8(ascii: ",") else { return scanner.index + 1 }
                scanner.index += 1
                scanner.skipWhitespace()
            }
        }

        // MARK: SingleValueDecodingContainer

        func decodeNil() -> Bool { isNull(at: position) }
        func decode(_ type: Bool.Type) throws -> Bool { try bool(at: position) }
        func decode(_ type: String.Type) throws -> String { try string(at: position) }
        func decode(_ type: Double.Type) throws -> Double { try double(at: position) }
        func decode(_ type: Float.Type) throws -> Float { throw Unsupported() }
        func decode(_ type: Int.Type) throws -> Int { try integer(Int.self, at: position) }
        func decode(_ type: Int8.Type) throws -> Int8 { try integer(Int8.self, at: position) }
        func decode(_ type: Int16.Type) throws -> Int16 { try integer(Int16.self, at: position) }
        func decode(_ type: Int32.Type) throws -> Int32 { try integer(Int32.self, at: position) }
        func decode(_ type: Int64.Type) throws -> Int64 { try integer(Int64.self, at: position) }
        func decode(_ type: UInt.Type) throws -> UInt { try integer(UInt.self, at: position) }
        func decode(_ type: UInt8.Type) throws -> UInt8 { try integer(UInt8.self, at: position) }
        func decode(_ type: UInt16.Type) throws -> UInt16 { try integer(UInt16.self, at: position) }
        func decode(_ type: UInt32.Type) throws -> UInt32 { try integer(UInt32.self, at: position) }
        func decode(_ type: UInt64.Type) throws -> UInt64 { try integer(UInt64.self, at: position) }
        func decode<T: Decodable>(_ type: T.Type) throws -> T { try decodeValue(type) }
    }

    fileprivate struct KeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
        let impl: Impl
        let members: [Member]

        var codingPath: [any CodingKey] { [] }

        var allKeys: [Key] {
            var names = Set<String>()
            var keys: [Key] = []
            for member in members {
                let name = impl.text(of: member.key)
                // A repeated key: which of its values Foundation keeps is its own business.
                guard names.insert(name).inserted else {
                    impl.leftToFoundation = true
                    continue
                }
                if let key = Key(stringValue: name) { keys.append(key) }
            }
            return keys
        }

        /// Where `key`'s value starts, nil when absent. Throws when it is named twice.
        func value(of key: Key) throws -> Int? {
            var found: Int?
            var name = key.stringValue
            try name.withUTF8 { wanted in
                let wanted = UnsafeRawBufferPointer(wanted)
                for member in members {
                    let candidate = UnsafeRawBufferPointer(rebasing: impl.bytes[member.key])
                    let matches = impl.needsText(candidate) ? impl.text(of: member.key) == key.stringValue
                        : candidate.count == wanted.count && candidate.elementsEqual(wanted)
                    guard matches else { continue }
                    guard found == nil else { throw Unsupported() }
                    found = member.value
                }
            }
            return found
        }

        func present(_ key: Key) throws -> Int {
            guard let start = try value(of: key) else { throw Unsupported() }
            return start
        }

        func contains(_ key: Key) -> Bool {
            do {
                return try value(of: key) != nil
            } catch {
                impl.leftToFoundation = true
                return false
            }
        }

        func decodeNil(forKey key: Key) throws -> Bool {
            impl.isNull(at: try present(key))
        }

        func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try impl.bool(at: try present(key)) }
        func decode(_ type: String.Type, forKey key: Key) throws -> String { try impl.string(at: try present(key)) }
        func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try impl.double(at: try present(key)) }
        func decode(_ type: Float.Type, forKey key: Key) throws -> Float { throw Unsupported() }
        func decode(_ type: Int.Type, forKey key: Key) throws -> Int {
            try impl.integer(Int.self, at: try present(key))
        }
        func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 {
            try impl.integer(Int8.self, at: try present(key))
        }
        func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 {
            try impl.integer(Int16.self, at: try present(key))
        }
        func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 {
            try impl.integer(Int32.self, at: try present(key))
        }
        func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 {
            try impl.integer(Int64.self, at: try present(key))
        }
        func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt {
            try impl.integer(UInt.self, at: try present(key))
        }
        func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 {
            try impl.integer(UInt8.self, at: try present(key))
        }
        func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 {
            try impl.integer(UInt16.self, at: try present(key))
        }
        func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 {
            try impl.integer(UInt32.self, at: try present(key))
        }
        func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 {
            try impl.integer(UInt64.self, at: try present(key))
        }
        func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
            try impl.decodeValue(type, at: try present(key))
        }

        /// One lookup for an optional member (the protocol's default makes three).
        private func optional<T>(_ key: Key, _ read: (Int) throws -> T) throws -> T? {
            guard let start = try value(of: key), !impl.isNull(at: start) else { return nil }
            return try read(start)
        }

        func decodeIfPresent(_ type: Bool.Type, forKey key: Key) throws -> Bool? {
            try optional(key, impl.bool(at:))
        }
        func decodeIfPresent(_ type: String.Type, forKey key: Key) throws -> String? {
            try optional(key, impl.string(at:))
        }
        func decodeIfPresent(_ type: Double.Type, forKey key: Key) throws -> Double? {
            try optional(key, impl.double(at:))
        }
        func decodeIfPresent(_ type: Int.Type, forKey key: Key) throws -> Int? {
            try optional(key) { try impl.integer(Int.self, at: $0) }
        }
        func decodeIfPresent(_ type: UInt64.Type, forKey key: Key) throws -> UInt64? {
            try optional(key) { try impl.integer(UInt64.self, at: $0) }
        }
        func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
            try optional(key) { try impl.decodeValue(type, at: $0) }
        }

        func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws
            -> KeyedDecodingContainer<NestedKey> {
            KeyedDecodingContainer(KeyedContainer<NestedKey>(impl: impl, members: try impl.members(at: try present(key))))
        }

        func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
            try UnkeyedContainer(impl: impl, start: try present(key))
        }

        func superDecoder() throws -> any Decoder { throw Unsupported() }
        func superDecoder(forKey key: Key) throws -> any Decoder { throw Unsupported() }
    }

    fileprivate struct UnkeyedContainer: UnkeyedDecodingContainer {
        let impl: Impl
        /// Where the first element starts, or the closing bracket.
        private let first: Int
        /// Where the next element starts, or the closing bracket.
        private var next: Int
        private(set) var currentIndex = 0

        init(impl: Impl, start: Int) throws {
            guard impl.bytes[start] == UInt8(ascii: "[") else { throw Unsupported() }
            self.impl = impl
            var scanner = impl.scanner(at: start + 1)
            scanner.skipWhitespace()
            first = scanner.index
            next = first
        }

        var codingPath: [any CodingKey] { [] }

        /// The number of elements, as Foundation gives it (counted when asked: nothing here asks).
        var count: Int? {
            var scanner = impl.scanner(at: first)
            var elements = 0
            while impl.bytes[scanner.index] != UInt8(ascii: "]") {
                guard (try? scanner.skipValue()) != nil else { return nil }
                elements += 1
                scanner.skipWhitespace()
                if impl.bytes[scanner.index] == UInt8(ascii: ",") {
                    scanner.index += 1
                    scanner.skipWhitespace()
                }
            }
            return elements
        }
        var isAtEnd: Bool { impl.bytes[next] == UInt8(ascii: "]") }

        /// The next element's start, moving past it.
        private mutating func advance() throws -> Int {
            guard !isAtEnd else { throw Unsupported() }
            let start = next
            var scanner = impl.scanner(at: start)
            try scanner.skipValue()
            moveOn(from: scanner)
            return start
        }

        /// Moves to the element after the one that ended where `scanner` is.
        private mutating func moveOn(from scanner: JSONSkimmer.Scanner) {
            var scanner = scanner
            scanner.skipWhitespace()
            if impl.bytes[scanner.index] == UInt8(ascii: ",") {
                scanner.index += 1
                scanner.skipWhitespace()
            }
            next = scanner.index
            currentIndex += 1
        }

        mutating func decodeNil() throws -> Bool {
            guard !isAtEnd else { throw Unsupported() }
            guard impl.isNull(at: next) else { return false }
            _ = try advance()
            return true
        }

        mutating func decode(_ type: Bool.Type) throws -> Bool { try impl.bool(at: try advance()) }
        mutating func decode(_ type: String.Type) throws -> String { try impl.string(at: try advance()) }
        mutating func decode(_ type: Double.Type) throws -> Double { try impl.double(at: try advance()) }
        mutating func decode(_ type: Float.Type) throws -> Float { throw Unsupported() }
        mutating func decode(_ type: Int.Type) throws -> Int { try impl.integer(Int.self, at: try advance()) }
        mutating func decode(_ type: Int8.Type) throws -> Int8 { try impl.integer(Int8.self, at: try advance()) }
        mutating func decode(_ type: Int16.Type) throws -> Int16 { try impl.integer(Int16.self, at: try advance()) }
        mutating func decode(_ type: Int32.Type) throws -> Int32 { try impl.integer(Int32.self, at: try advance()) }
        mutating func decode(_ type: Int64.Type) throws -> Int64 { try impl.integer(Int64.self, at: try advance()) }
        mutating func decode(_ type: UInt.Type) throws -> UInt { try impl.integer(UInt.self, at: try advance()) }
        mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try impl.integer(UInt8.self, at: try advance()) }
        mutating func decode(_ type: UInt16.Type) throws -> UInt16 {
            try impl.integer(UInt16.self, at: try advance())
        }
        mutating func decode(_ type: UInt32.Type) throws -> UInt32 {
            try impl.integer(UInt32.self, at: try advance())
        }
        mutating func decode(_ type: UInt64.Type) throws -> UInt64 {
            try impl.integer(UInt64.self, at: try advance())
        }
        mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
            guard T.self is any SkimmedDecodable.Type else { return try impl.decodeValue(type, at: try advance()) }
            // An object read member by member was walked to its end already.
            guard !isAtEnd else { throw Unsupported() }
            let value = try impl.decodeValue(type, at: next)
            guard let object = impl.lastObject, object.start == next else { throw Unsupported() }
            moveOn(from: impl.scanner(at: object.end))
            return value
        }

        mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws
            -> KeyedDecodingContainer<NestedKey> {
            KeyedDecodingContainer(KeyedContainer<NestedKey>(impl: impl, members: try impl.members(at: try advance())))
        }

        mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
            try UnkeyedContainer(impl: impl, start: try advance())
        }

        mutating func superDecoder() throws -> any Decoder { throw Unsupported() }
    }

    /// An object read member by member, for `SkimmedDecodable` types: each member's value is read where it is,
    /// with no container, key object or existential in between.
    package struct Object {
        fileprivate let impl: Impl
        fileprivate let start: Int

        /// Calls `body` with the index in `names` and the value's start of each member named in `names`, in the
        /// document's order; members of other names are skipped. Throws `Unsupported` when a name comes twice, or
        /// the value is not an object.
        package func forEachMember(named names: [StaticString], _ body: (Int, Value) throws -> Void) throws {
            var seen: UInt64 = 0
            let end = try impl.forEachMember(ofObjectAt: start) { key, value in
                guard let index = index(ofKey: key, in: names) else { return }
                guard seen & (1 << index) == 0 else { throw Unsupported() }
                seen |= 1 << index
                try body(index, Value(impl: impl, start: value))
            }
            impl.lastObject = (start, end)
        }

        private func index(ofKey range: Range<Int>, in names: [StaticString]) -> Int? {
            let key = UnsafeRawBufferPointer(rebasing: impl.bytes[range])
            if impl.needsText(key) {
                let text = impl.text(of: range)
                return names.firstIndex { text == $0.description }
            }
            return names.firstIndex { name in
                name.utf8CodeUnitCount == key.count && memcmp(name.utf8Start, key.baseAddress!, key.count) == 0
            }
        }
    }

    /// One member's value, read as the type its member has; a value of another kind throws `Unsupported`.
    package struct Value {
        fileprivate let impl: Impl
        fileprivate let start: Int

        package var isNull: Bool { impl.isNull(at: start) }
        package func string() throws -> String { try impl.string(at: start) }
        package func double() throws -> Double { try impl.double(at: start) }
        package func bool() throws -> Bool { try impl.bool(at: start) }
        package func integer<I: FixedWidthInteger>(_ type: I.Type = Int.self) throws -> I {
            try impl.integer(I.self, at: start)
        }
        package func decode<T: Decodable>(_ type: T.Type) throws -> T { try impl.decodeValue(T.self, at: start) }

        /// An array of integers, the most common array of a report (a sample's frames).
        package func integers() throws -> [Int] {
            guard impl.bytes[start] == UInt8(ascii: "[") else { throw Unsupported() }
            var values: [Int] = []
            var scanner = impl.scanner(at: start + 1)
            scanner.skipWhitespace()
            guard impl.bytes[scanner.index] != UInt8(ascii: "]") else { return values }
            values.reserveCapacity(32)
            while true {
                let element = scanner.index
                values.append(try impl.integer(Int.self, at: element))
                try scanner.skipNumber()
                scanner.skipWhitespace()
                guard impl.bytes[scanner.index] == UInt8(ascii: ",") else { return values }
                scanner.index += 1
                scanner.skipWhitespace()
            }
        }

        /// nil for null, as `decodeIfPresent` reads it.
        package func optional<T>(_ read: (Value) throws -> T) throws -> T? {
            isNull ? nil : try read(self)
        }
    }
}

/// A type `SkimmedJSONDecoder` reads member by member (`init(skimming:)`) rather than through its `Decodable`
/// conformance: the objects a report has hundreds of (samples, frames), where Codable's containers were most of the
/// time. Its reading must give what its synthesized `init(from:)` gives, or throw; the decoder's differential tests
/// compare the two on every member.
package protocol SkimmedDecodable: Decodable {
    init(skimming object: SkimmedJSONDecoder.Object) throws
}
