import CStallmonConcurrency
import CStallmonConcurrencyTesting
import Testing

/// The install's compare-and-swaps on variables of the test's own (the runtime's are process-wide): a refused global
/// hook must leave nothing of ours set, even for a moment, since a job enqueued through a delayed hook in that moment
/// would run through this target after the install gave up.
@Suite("Installing the global executor's hooks")
struct HookInstallOrderTests {
    /// Someone else's hook: never called, only compared (computed: a raw pointer is not Sendable).
    static var foreign: UnsafeMutableRawPointer? { UnsafeMutableRawPointer(bitPattern: 0x5151) }

    struct Swap {
        let outcome: Int32
        let everSet: UInt32
        let global: UnsafeMutableRawPointer?
        let delay: UnsafeMutableRawPointer?
        let deadline: UnsafeMutableRawPointer?
    }

    static func swap(global: UnsafeMutableRawPointer? = nil, delay: UnsafeMutableRawPointer? = nil,
                     deadline: UnsafeMutableRawPointer? = nil) -> Swap {
        var global = global
        var delay = delay
        var deadline = deadline
        var everSet: UInt32 = 0
        let outcome = cstallmon_concurrency_swap_hooks(&global, &delay, &deadline, &everSet)
        return Swap(outcome: outcome, everSet: everSet, global: global, delay: delay, deadline: deadline)
    }

    static func code(_ outcome: cstallmon_hooks_outcome) -> Int32 {
        Int32(outcome.rawValue)
    }

    @Test("all three free: all three set")
    func allFree() {
        let result = Self.swap()
        #expect(result.outcome == Self.code(CSTALLMON_HOOKS_SET))
        #expect(result.everSet == 0b111)
        #expect(result.global != nil && result.delay != nil && result.deadline != nil)
    }

    @Test("the global hook taken: none of ours was ever set, the other owner's hook untouched")
    func globalTaken() {
        let result = Self.swap(global: Self.foreign)
        #expect(result.outcome == Self.code(CSTALLMON_HOOKS_GLOBAL_TAKEN))
        #expect(result.everSet == 0, "a delayed hook set before the refusal could have queued a job through us")
        #expect(result.global == Self.foreign)
        #expect(result.delay == nil && result.deadline == nil)
    }

    @Test("a delayed hook taken: ours put back, the global one included, the other owner's untouched")
    func delayedTaken() {
        let delayTaken = Self.swap(delay: Self.foreign)
        #expect(delayTaken.outcome == Self.code(CSTALLMON_HOOKS_ROLLED_BACK))
        #expect(delayTaken.everSet == 0b001)
        #expect(delayTaken.global == nil && delayTaken.deadline == nil)
        #expect(delayTaken.delay == Self.foreign)

        let deadlineTaken = Self.swap(deadline: Self.foreign)
        #expect(deadlineTaken.outcome == Self.code(CSTALLMON_HOOKS_ROLLED_BACK))
        #expect(deadlineTaken.everSet == 0b011)
        #expect(deadlineTaken.global == nil && deadlineTaken.delay == nil)
        #expect(deadlineTaken.deadline == Self.foreign)
    }
}
