import CStallmonConcurrency
import Instrumentation
import Logging
import Synchronization

/// What a request is doing, for the reports of its stalls: set once per request (the route, `GET /users/{id}`) and
/// it is the `label` of every stall and starvation report, and every event line, of the jobs of that request's task
/// and of every task started inside the scope (child tasks, task groups, unstructured `Task {}`s, Vapor's responder
/// tasks), on the global executor or the main actor, while the scope lasts. When the request is traced
/// (swift-distributed-tracing: a span in the current `ServiceContext`), the reports carry its trace and span ids too.
///
/// ```swift
/// try await StallLabel.withValue("GET /users/{id}") {
///     try await handleTheRequest()
/// }
/// ```
///
/// The scope takes an entry of a preallocated table (the label, and the span's ids from the installed tracer's W3C
/// `traceparent`) and binds the entry's id as a task-local, which every task started inside inherits. The watchdog
/// reads that id from the stalled task's task-local bindings when one of its jobs stalls. Not labelled: code that
/// runs in an actor's drain job rather than in the task's own job (an actor's method the call had to wait for, a
/// `Task {}` started from an actor's code, which runs on the actor), a task still running after the scope ended, and
/// a scope whose entry did not fit the table (counted, never blocking).
public enum StallLabel {
    /// The longest label kept, in UTF-8 bytes; a longer one is cut at a character boundary.
    public static let maxBytes = Int(CSTALLMON_LABEL_MAX_BYTES)

    /// The label of the current task's innermost scope, inherited by every task started inside it.
    public static var current: String? { scope.label }

    /// Runs `operation` with `label` as the current task's stall label (and the current span's ids, if it is
    /// traced), then puts back what it had before.
    public static func withValue<Result>(
        _ label: String, isolation: isolated (any Actor)? = #isolation,
        operation: () async throws -> Result
    ) async rethrows -> Result {
        let entry = open(label, trace: TraceIdentifiers.current())
        defer { cstallmon_label_close(entry) }
        return try await $scope.withValue(Scope(entry: entry, label: label), operation: operation,
                                          isolation: isolation)
    }

    /// The binding of a scope: the table entry's id first, where the watchdog reads it in the task-local's value.
    struct Scope: Sendable {
        /// The label table's entry (0: none, the table was full).
        var entry: UInt64
        /// The label, for `current`.
        var label: String?
    }

    @TaskLocal static var scope = Scope(entry: 0, label: nil)

    /// The key the runtime files the binding under: the TaskLocal object.
    static var scopeKey: UInt { UInt(bitPattern: Unmanaged.passUnretained($scope).toOpaque()) }

    /// The current task's label as the watchdog would read it: from the task's own task-local bindings, then the
    /// table (nil when the layout check has not passed, or there is none).
    static func readBack() -> TaskLabel? {
        let task = RunningTask.address
        var id: UInt64 = 0
        var entry = cstallmon_label_entry()
        guard task != 0, cstallmon_task_local_value(task, &id) == 1, cstallmon_label_lookup(id, &entry) == 1 else {
            return nil
        }
        return TaskLabel(entry)
    }

    private static func open(_ label: String, trace: TraceIdentifiers?) -> UInt64 {
        var label = label
        // A native string's UTF-8 is contiguous: no copy, no allocation.
        return label.withUTF8 { bytes in
            var length = min(bytes.count, maxBytes)
            // Cut at a character boundary: never inside a multi-byte sequence (continuation bytes are 10xxxxxx).
            if length < bytes.count {
                while length > 0 && bytes[length] & 0xC0 == 0x80 { length -= 1 }
            }
            return bytes.withMemoryRebound(to: CChar.self) { text in
                guard let trace else { return cstallmon_label_open(text.baseAddress, length, nil, nil) }
                return trace.withBytes { traceID, spanID in
                    cstallmon_label_open(text.baseAddress, length, traceID, spanID)
                }
            }
        }
    }

    private static let layoutChecked = Atomic<Bool>(false)

    /// Where a task keeps its task-local bindings is no public interface: once per process, a task binds known values
    /// and the C side finds the word that leads to them, then confirms it with a nested binding, a child task, a task
    /// group's child and an unstructured task. Labels are read only if all of that held; otherwise a notice, and no
    /// async report has a label.
    package static func checkLayout(logger: Logger) {
        guard !layoutChecked.exchange(true, ordering: .acquiringAndReleasing) else { return }
        // Its reads go through the seccomp probe's verdict on process_vm_readv: resolved here, or, before any monitor
        // was made, every read would be refused and the check would fail for the process's life.
        _ = SystemCallFilter.allowsOwnMemoryReads
        // High priority: a stall's label is read when the stall begins, and one before the check passed has none.
        Task.detached(priority: .high) {
            let passed = await LayoutCheck.run()
            cstallmon_task_locals_set_verdict(passed ? 1 : 0)
            if !passed {
                logger.notice("""
                    stallmon: stall labels are not read on this Swift runtime (a task's task-local values are not \
                    where this build looks for them); async reports carry no label or trace ids
                    """)
            }
        }
    }

    private enum LayoutCheck {
        static func run() async -> Bool {
            let outer = UInt64.random(in: 1...UInt64.max)
            let inner = UInt64.random(in: 1...UInt64.max)
            let key = scopeKey
            let bound = await $scope.withValue(Scope(entry: outer, label: nil)) {
                let task = RunningTask.address
                guard cstallmon_task_locals_find_head(task, key, outer) >= 0 else { return false }
                let nested = await $scope.withValue(Scope(entry: inner, label: nil)) {
                    async let child = confirm(inner)
                    let unstructured = await Task { confirm(inner) }.value
                    let grouped = await withTaskGroup(of: Bool.self) { group in
                        group.addTask { confirm(inner) }
                        return await group.next() ?? false
                    }
                    let inChild = await child
                    return confirm(inner) && unstructured && grouped && inChild
                }
                return nested && confirm(outer)
            }
            return bound && confirm(0)
        }

        private static func confirm(_ expected: UInt64) -> Bool {
            cstallmon_task_locals_confirm(RunningTask.address, expected) == 1
        }
    }
}

/// A stalled task's label as the watchdog read it: the label's text, and the ids of the request's span if traced.
struct TaskLabel: Sendable, Equatable {
    var text: String?
    /// 32 lowercase hex digits (W3C), when the scope was traced.
    var traceId: String?
    /// 16 lowercase hex digits (W3C), when the scope was traced.
    var spanId: String?

    init(text: String?, traceId: String? = nil, spanId: String? = nil) {
        self.text = text
        self.traceId = traceId
        self.spanId = spanId
    }

    init(_ entry: cstallmon_label_entry) {
        var entry = entry
        let length = Int(entry.length)
        text = length == 0
            ? nil : withUnsafeBytes(of: &entry.text) { String(decoding: $0.prefix(length), as: UTF8.self) }
        if entry.traced == 1 {
            traceId = withUnsafeBytes(of: &entry.trace_id) { TraceIdentifiers.hex($0) }
            spanId = withUnsafeBytes(of: &entry.span_id) { TraceIdentifiers.hex($0) }
        }
    }
}
