import Instrumentation

/// The trace and span ids of the current span, as the installed tracer propagates them: its W3C `traceparent`
/// (`00-<32 hex trace id>-<16 hex span id>-<flags>`), which swift-otel's tracer and any W3C propagator inject. A
/// tracer that injects no `traceparent` gives none. No tracer-specific type: only swift-distributed-tracing's
/// `Instrument.inject`.
struct TraceIdentifiers: Sendable, Equatable {
    /// The trace id's 16 bytes as two big-endian halves, and the span id's 8.
    var traceHigh: UInt64
    var traceLow: UInt64
    var span: UInt64

    init(traceHigh: UInt64, traceLow: UInt64, span: UInt64) {
        self.traceHigh = traceHigh
        self.traceLow = traceLow
        self.span = span
    }

    /// The ids of the span in `ServiceContext.current`; nil, at the cost of one task-local read, when there is none.
    static func current() -> TraceIdentifiers? {
        guard let context = ServiceContext.current else { return nil }
        var traceparent: String?
        InstrumentationSystem.instrument.inject(context, into: &traceparent, using: TraceparentInjector())
        return traceparent.flatMap(Self.init(traceparent:))
    }

    /// Parses a W3C `traceparent`; nil unless it has a version other than `ff`, a trace id and a span id of the
    /// right length in hex, neither all zero, and flags (a later version may add fields after them). Reads the
    /// string's UTF-8 in place.
    init?(traceparent: String) {
        var traceparent = traceparent
        guard let parsed = traceparent.withUTF8({ Self.parse($0) }) else { return nil }
        self = parsed
    }

    var traceIDHex: String { Self.hex(traceHigh) + Self.hex(traceLow) }
    var spanIDHex: String { Self.hex(span) }

    /// Runs `body` with the trace id's 16 bytes and the span id's 8, in order.
    func withBytes<Result>(_ body: (UnsafePointer<UInt8>, UnsafePointer<UInt8>) -> Result) -> Result {
        var trace = (traceHigh.bigEndian, traceLow.bigEndian)
        var spanID = span.bigEndian
        return withUnsafeBytes(of: &trace) { traceBytes in
            withUnsafeBytes(of: &spanID) { spanBytes in
                body(traceBytes.baseAddress!.assumingMemoryBound(to: UInt8.self),
                     spanBytes.baseAddress!.assumingMemoryBound(to: UInt8.self))
            }
        }
    }

    static func hex(_ bytes: some Sequence<UInt8>) -> String {
        var text = [UInt8]()
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0xF)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    private static func hex(_ value: UInt64) -> String {
        withUnsafeBytes(of: value.bigEndian) { hex($0) }
    }

    private static let digits = Array("0123456789abcdef".utf8)

    // version "-" trace id "-" span id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2.
    private static func parse(_ text: UnsafeBufferPointer<UInt8>) -> TraceIdentifiers? {
        let dash = UInt8(ascii: "-")
        guard text.count >= 55, text[2] == dash, text[35] == dash, text[52] == dash,
              text.count == 55 || text[55] == dash,
              let version = number(text, 0, 2), version != 0xFF, number(text, 53, 2) != nil,
              let traceHigh = number(text, 3, 16), let traceLow = number(text, 19, 16),
              let span = number(text, 36, 16),
              traceHigh | traceLow != 0, span != 0
        else { return nil }
        return TraceIdentifiers(traceHigh: traceHigh, traceLow: traceLow, span: span)
    }

    /// The `count` (≤ 16) hex digits at `start`, or nil if one is not a hex digit.
    private static func number(_ text: UnsafeBufferPointer<UInt8>, _ start: Int, _ count: Int) -> UInt64? {
        var value: UInt64 = 0
        for index in start..<(start + count) {
            guard let digit = nibble(text[index]) else { return nil }
            value = value << 4 | UInt64(digit)
        }
        return value
    }

    private static func nibble(_ digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): digit - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

/// Keeps the `traceparent` an instrument injects, and nothing else. Header names are case-insensitive; propagators
/// write this one in lower case, which is compared first, with no allocation.
private struct TraceparentInjector: Injector {
    func inject(_ value: String, forKey key: String, into carrier: inout String?) {
        if key == "traceparent" || (key.utf8.count == 11 && key.lowercased() == "traceparent") { carrier = value }
    }
}
