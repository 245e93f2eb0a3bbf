import InMemoryTracing
import Instrumentation
import Tracing

/// swift-distributed-tracing's `InMemoryTracer`, with W3C ids (32 and 16 hex digits) and W3C propagation: `inject`
/// writes `traceparent`, as swift-otel's tracer does with its default propagator. The spans it finished are the
/// ones this service "exported" (GET /spans lists them).
struct W3CInMemoryTracer: Tracer {
    let tracer = InMemoryTracer(idGenerator: InMemoryTracer.IDGenerator(
        nextTraceID: { randomHex(bytes: 16) }, nextSpanID: { randomHex(bytes: 8) }))

    func startSpan<Instant: TracerInstant>(
        _ operationName: String, context: @autoclosure () -> InstrumentationContext, ofKind kind: SpanKind,
        at instant: @autoclosure () -> Instant, function: String, file fileID: String, line: UInt
    ) -> InMemorySpan {
        tracer.startSpan(operationName, context: context(), ofKind: kind, at: instant(), function: function,
                         file: fileID, line: line)
    }

    func activeSpan(identifiedBy context: InstrumentationContext) -> InMemorySpan? {
        tracer.activeSpan(identifiedBy: context)
    }

    func forceFlush() {}

    func inject<Carrier, Inject: Injector>(_ context: InstrumentationContext, into carrier: inout Carrier,
                                           using injector: Inject) where Inject.Carrier == Carrier {
        guard let span = context.inMemorySpanContext else { return }
        injector.inject("00-\(span.traceID)-\(span.spanID)-01", forKey: "traceparent", into: &carrier)
    }

    func extract<Carrier, Extract: Extractor>(_ carrier: Carrier, into context: inout InstrumentationContext,
                                              using extractor: Extract) where Extract.Carrier == Carrier {}

    /// `span NAME TRACE_ID SPAN_ID` per finished span.
    var finishedSpanLines: String {
        tracer.finishedSpans.map { "span \($0.operationName) \($0.traceID) \($0.spanID)" }.joined(separator: "\n")
    }
}

private func randomHex(bytes: Int) -> String {
    (0..<bytes).map { _ in
        let text = String(UInt8.random(in: 0...255), radix: 16)
        return text.count == 1 ? "0" + text : text
    }.joined()
}
