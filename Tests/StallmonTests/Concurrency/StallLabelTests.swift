import CStallmonConcurrency
import Testing

@testable import Stallmon

/// `StallLabel` in this process: the table entry the watchdog reads, keyed by the task, while the scope lasts.
@Suite("StallLabel")
struct StallLabelTests {
    /// The current task's label as the watchdog would read it from the table.
    static func tableLabel() -> String? {
        let task = withUnsafeCurrentTask { task in task.map { unsafeBitCast($0, to: UInt.self) } } ?? 0
        var buffer = [CChar](repeating: 0, count: StallLabel.maxBytes + 1)
        let length = cstallmon_label_read(task, &buffer, buffer.count)
        guard length >= 0 else { return nil }
        return String(decoding: buffer.prefix(Int(length)).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    @Test("set for the scope, the outer label back after a nested one, none after; the task-local alike")
    func scopes() async {
        #expect(Self.tableLabel() == nil)
        await StallLabel.withValue("GET /users/{id}") {
            #expect(Self.tableLabel() == "GET /users/{id}")
            #expect(StallLabel.current == "GET /users/{id}")
            await StallLabel.withValue("SQL fetch") {
                #expect(Self.tableLabel() == "SQL fetch")
            }
            #expect(Self.tableLabel() == "GET /users/{id}")
        }
        #expect(Self.tableLabel() == nil)
        #expect(StallLabel.current == nil)
    }

    @Test("a child task inherits the task-local, not the table entry; its own scope leaves no entry behind")
    func childTasks() async {
        await StallLabel.withValue("POST /orders") {
            let seen = await Task { (Self.tableLabel(), StallLabel.current) }.value
            #expect(seen.0 == nil)
            #expect(seen.1 == "POST /orders")
            // The README's pattern for a child: its own scope, from the inherited label; gone when it ends (not
            // restored to the parent's, which the child never had in the table).
            let after = await withTaskGroup(of: (String?, String?).self) { group in
                group.addTask {
                    let inside = await StallLabel.withValue(StallLabel.current ?? "batch") { Self.tableLabel() }
                    return (inside, Self.tableLabel())
                }
                return await group.next()!
            }
            #expect(after.0 == "POST /orders")
            #expect(after.1 == nil, "the child's entry is cleared, not left with the parent's label")
        }
    }

    @Test("a label over 96 bytes is cut at a character boundary")
    func longLabels() async {
        let label = String(repeating: "a", count: 95) + "é" + "tail"  // é is 2 bytes: at 95..96
        await StallLabel.withValue(label) {
            #expect(Self.tableLabel() == String(repeating: "a", count: 95), "cut before the é, not inside it")
        }
    }

    @Test("thrown errors leave no entry behind")
    func errors() async {
        struct Failure: Error {}
        await #expect(throws: Failure.self) {
            try await StallLabel.withValue("GET /fail") { throw Failure() }
        }
        #expect(Self.tableLabel() == nil)
    }
}
