import CStallmonConcurrency
import CStallmonConcurrencyTesting
import Instrumentation
import Testing

@testable import Stallmon

/// `StallLabel` in this process: the entry the watchdog reads, through the task-local every task started inside the
/// scope inherits, while the scope lasts; and the span's ids, from the installed instrument's `traceparent`.
@Suite("StallLabel")
struct StallLabelTests {
    /// The layout check, as a monitor runs it at start (it must pass on this runtime: labels depend on it).
    static func layoutChecked() async -> Bool {
        if cstallmon_task_locals_layout() == 0 { StallLabel.checkLayout(logger: .init(label: "test")) }
        for _ in 0..<500 where cstallmon_task_locals_layout() == 0 { try? await Task.sleep(for: .milliseconds(10)) }
        return cstallmon_task_locals_layout() == 1
    }

    static var label: String? { StallLabel.readBack()?.text }

    @Test("set for the scope, the outer label back after a nested one, none after; `current` alike")
    func scopes() async {
        #expect(await Self.layoutChecked())
        #expect(Self.label == nil)
        await StallLabel.withValue("GET /users/{id}") {
            #expect(Self.label == "GET /users/{id}")
            #expect(StallLabel.current == "GET /users/{id}")
            await StallLabel.withValue("SQL fetch") {
                #expect(Self.label == "SQL fetch")
            }
            #expect(Self.label == "GET /users/{id}")
        }
        #expect(Self.label == nil)
        #expect(StallLabel.current == nil)
    }

    @Test("every task started inside the scope reads it (async let, a group's child, an unstructured task), none after")
    func inheritedByEveryTask() async throws {
        #expect(await Self.layoutChecked())
        let (outlived, release) = AsyncStream.makeStream(of: Void.self)
        let late: Task<String?, Never> = await StallLabel.withValue("POST /orders") {
            async let child = Self.label
            let unstructured = await Task { Self.label }.value
            let grouped = await withTaskGroup(of: String?.self) { group in
                group.addTask { Self.label }
                return await group.next() ?? nil
            }
            #expect(await child == "POST /orders")
            #expect(unstructured == "POST /orders")
            #expect(grouped == "POST /orders")
            // A task that outlives the scope: labelled while the scope lasts, its inherited id finding no entry after.
            let started = AsyncStream.makeStream(of: String?.self)
            let late = Task {
                started.continuation.yield(Self.label)
                for await _ in outlived { break }
                return Self.label
            }
            for await during in started.stream {
                #expect(during == "POST /orders")
                break
            }
            return late
        }
        release.yield()
        #expect(await late.value == nil, "an id that outlived its scope finds nothing, not another request's label")
    }

    @Test("a label over 96 bytes is cut at a character boundary")
    func longLabels() async {
        #expect(await Self.layoutChecked())
        let label = String(repeating: "a", count: 95) + "é" + "tail"  // é is 2 bytes: at 95..96
        await StallLabel.withValue(label) {
            #expect(Self.label == String(repeating: "a", count: 95), "cut before the é, not inside it")
        }
    }

    @Test("thrown errors leave no entry behind")
    func errors() async {
        #expect(await Self.layoutChecked())
        struct Failure: Error {}
        var leaked: UInt64 = 0
        await #expect(throws: Failure.self) {
            try await StallLabel.withValue("GET /fail") {
                leaked = StallLabel.scope.entry
                throw Failure()
            }
        }
        var entry = cstallmon_label_entry()
        #expect(leaked != 0 && cstallmon_label_lookup(leaked, &entry) == 0)
    }

    @Test("the span's ids from the instrument's traceparent; none without a span")
    func traceIdentifiers() async {
        #expect(await Self.layoutChecked())
        TraceparentInstrument.bootstrapOnce
        await StallLabel.withValue("GET /untraced") {
            #expect(StallLabel.readBack() == TaskLabel(text: "GET /untraced"))
        }
        var context = ServiceContext.topLevel
        context[TraceparentInstrument.Key.self] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        await ServiceContext.withValue(context) {
            await StallLabel.withValue("GET /traced") {
                let inherited = await Task { StallLabel.readBack() }.value
                #expect(inherited == TaskLabel(text: "GET /traced", traceId: "4bf92f3577b34da6a3ce929d0e0e4736",
                                              spanId: "00f067aa0ba902b7"))
            }
        }
    }

    @Test("traceparent: W3C's form only", arguments: [
        ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01", true),
        ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-extra", true),  // a later version may add fields
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", false),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", false),
        ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false),
        ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", false),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false),
        ("00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", false),
        ("00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", false),
        ("trace-1", false),
    ])
    func traceparent(text: String, valid: Bool) {
        let parsed = TraceIdentifiers(traceparent: text)
        #expect((parsed != nil) == valid)
        if let parsed {
            #expect(parsed.traceIDHex == "4bf92f3577b34da6a3ce929d0e0e4736")
            #expect(parsed.spanIDHex == "00f067aa0ba902b7")
        }
    }

    /// Before: the check, run before any monitor was made (the bench's async section does), found every read of the
    /// process's own memory refused (the seccomp probe had given no verdict yet) and failed for the process's life.
    @Test func theLayoutCheckPassesBeforeAnyMonitorExists() async throws {
        let run = try await ConcurrencyStallMonitorTests.run("label-check-first")
        #expect(run.status == 0, "\(run.output) \(run.errors)")
        #expect(run.value("layout") == "1", "\(run.output) \(run.errors)")
    }
}

/// Injects the `traceparent` a test put into the context, as a W3C propagator would from its span. Bootstrapped once
/// per test process; a context without the key (every other test's) gets nothing injected.
struct TraceparentInstrument: Instrument {
    enum Key: ServiceContextKey { typealias Value = String }

    static let bootstrapOnce: Void = InstrumentationSystem.bootstrap(TraceparentInstrument())

    func inject<Carrier, Inject: Injector>(_ context: ServiceContext, into carrier: inout Carrier, using injector: Inject)
    where Inject.Carrier == Carrier {
        if let traceparent = context[Key.self] { injector.inject(traceparent, forKey: "traceparent", into: &carrier) }
    }

    func extract<Carrier, Extract: Extractor>(_ carrier: Carrier, into context: inout ServiceContext,
                                              using extractor: Extract) where Extract.Carrier == Carrier {}
}
