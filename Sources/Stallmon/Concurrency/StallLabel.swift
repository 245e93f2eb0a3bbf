import CStallmonConcurrency

/// What a task is doing, for the reports of its stalls: set once per request (the route, `GET /users/{id}`) and it
/// is the `label` of every stall and starvation report, and every event line, of that task's jobs on the global
/// executor or the main actor while the scope lasts.
///
/// ```swift
/// try await StallLabel.withValue("GET /users/{id}") {
///     try await handleTheRequest()
/// }
/// ```
///
/// The watchdog cannot read another task's task-locals, so besides the task-local `current` the label goes into a
/// preallocated table keyed by the task (a compare-and-swap and a copy of at most 96 bytes, no lock or allocation),
/// which the watchdog reads when one of the task's jobs stalls. A child task does not inherit it in reports (it
/// inherits `current`, so `group.addTask { await StallLabel.withValue(StallLabel.current ?? "batch") { … } }`
/// labels it); nor does an actor's method, which runs in the actor's own job.
public enum StallLabel {
    /// The label of the current task (inherited by child tasks, as any task-local).
    @TaskLocal public static var current: String?

    /// The longest label kept, in UTF-8 bytes; a longer one is cut at a character boundary.
    public static let maxBytes = Int(CSTALLMON_LABEL_MAX_BYTES)

    /// Runs `operation` with `label` as the current task's stall label, then puts back the label it had before.
    public static func withValue<Result>(
        _ label: String, isolation: isolated (any Actor)? = #isolation,
        operation: () async throws -> Result
    ) async rethrows -> Result {
        let task = withUnsafeCurrentTask { task in task.map { unsafeBitCast($0, to: UInt.self) } } ?? 0
        // This task's own entry, if an outer scope of the same task set one (not `current`, which a child task
        // inherits from its parent: restoring that would leave the child an entry nobody clears).
        let outer = task == 0 ? nil : tableLabel(of: task)
        let slot = task == 0 ? -1 : set(label, task: task)
        defer {
            if task != 0 {
                if let outer { _ = set(outer, task: task) } else { cstallmon_label_clear(slot, task) }
            }
        }
        return try await $current.withValue(label, operation: operation, isolation: isolation)
    }

    /// The label `task` has in the table, as the watchdog would read it (the table never holds an empty one).
    static func tableLabel(of task: UInt) -> String? {
        readCString(capacity: maxBytes + 1) { Int(cstallmon_label_read(task, $0, $1)) }
    }

    private static func set(_ label: String, task: UInt) -> Int32 {
        var label = label
        // A native string's UTF-8 is contiguous: no copy, no allocation.
        return label.withUTF8 { bytes in
            var length = min(bytes.count, maxBytes)
            // Cut at a character boundary: never inside a multi-byte sequence (continuation bytes are 10xxxxxx).
            if length < bytes.count {
                while length > 0 && bytes[length] & 0xC0 == 0x80 { length -= 1 }
            }
            return bytes.withMemoryRebound(to: CChar.self) { text in
                cstallmon_label_set(task, text.baseAddress, length)
            }
        }
    }
}
