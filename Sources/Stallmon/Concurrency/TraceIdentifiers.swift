import Instrumentation

/// The trace and span ids of the current span, as the installed tracer propagates them: its W3C `traceparent`
/// (`00-<32 hex trace id>-<16 hex span id>-<flags>`), which swift-otel's tracer and any W3C propagator inject. A
/// tracer that injects no `traceparent` gives none. No tracer-specific type: only swift-distributed-tracing's
/// `Instrument.inject`.
struct TraceIdentifiers: Sendable, Equatable {
    var traceID: [UInt8]
    var spanID: [UInt8]

    /// The ids of the span in `ServiceContext.current`; nil, at the cost of one task-local read, when there is none.
    static func current() -> TraceIdentifiers? {
        guard let context = ServiceContext.current else { return nil }
        var traceparent: String?
        InstrumentationSystem.instrument.inject(context, into: &traceparent, using: TraceparentInjector())
        return traceparent.flatMap(Self.init(traceparent:))
    }

    /// Parses a W3C `traceparent`; nil unless it has a version other than `ff`, a trace id and a span id of the
    /// right length in hex, neither all zero.
    init?(traceparent: String) {
        let fields = traceparent.split(separator: "-", omittingEmptySubsequences: false)
        guard fields.count >= 4, fields[0].count == 2, fields[0].lowercased() != "ff",
              let traceID = Self.bytes(fromHex: fields[1], count: 16),
              let spanID = Self.bytes(fromHex: fields[2], count: 8),
              traceID.contains(where: { $0 != 0 }), spanID.contains(where: { $0 != 0 })
        else { return nil }
        self.traceID = traceID
        self.spanID = spanID
    }

    static func hex(_ bytes: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text = [UInt8]()
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0xF)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    private static func bytes(fromHex text: Substring, count: Int) -> [UInt8]? {
        let digits = Array(text.utf8)
        guard digits.count == count * 2 else { return nil }
        var bytes = [UInt8]()
        bytes.reserveCapacity(count)
        for index in stride(from: 0, to: digits.count, by: 2) {
            guard let high = nibble(digits[index]), let low = nibble(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
        }
        return bytes
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

/// Keeps the `traceparent` an instrument injects, and nothing else.
private struct TraceparentInjector: Injector {
    func inject(_ value: String, forKey key: String, into carrier: inout String?) {
        if key.lowercased() == "traceparent" { carrier = value }
    }
}
