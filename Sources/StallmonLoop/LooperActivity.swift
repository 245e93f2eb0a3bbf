/// The moments of a loop's life that observers can hook, in CFRunLoop's order and with CFRunLoop's bit values.
///
/// One pass of the loop: `beforeTimers` → due timers fire → `beforeSources` → posted blocks and signalled custom
/// sources run → `beforeWaiting` → the loop sleeps in epoll → `afterWaiting` → ready file descriptors are handled.
/// When work is already pending the loop polls instead of sleeping and emits neither `beforeWaiting` nor
/// `afterWaiting` for that pass. `entry` and `exit` bracket each `run`.
public struct LooperActivity: OptionSet, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt32

    @inlinable
    public init(rawValue: UInt32) {
        self.rawValue = rawValue
    }

    // Inlinable computed constants rather than `static let`s: a `static let` of another module is reached through a
    // lazy-initialisation accessor on every use, which observers would pay on every activity.
    @inlinable public static var entry: LooperActivity { LooperActivity(rawValue: 1 << 0) }
    @inlinable public static var beforeTimers: LooperActivity { LooperActivity(rawValue: 1 << 1) }
    @inlinable public static var beforeSources: LooperActivity { LooperActivity(rawValue: 1 << 2) }
    @inlinable public static var beforeWaiting: LooperActivity { LooperActivity(rawValue: 1 << 5) }
    @inlinable public static var afterWaiting: LooperActivity { LooperActivity(rawValue: 1 << 6) }
    @inlinable public static var exit: LooperActivity { LooperActivity(rawValue: 1 << 7) }
    public static let allActivities: LooperActivity = [
        .entry, .beforeTimers, .beforeSources, .beforeWaiting, .afterWaiting, .exit,
    ]

    /// The single activities in loop order.
    public static let ordered: [LooperActivity] = [
        .entry, .beforeTimers, .beforeSources, .beforeWaiting, .afterWaiting, .exit,
    ]

    /// Position of a single activity in `ordered`; used to index per-activity observer lists.
    @inline(__always)
    var bucket: Int {
        // Bit index → bucket: entry 0, beforeTimers 1, beforeSources 2, beforeWaiting (bit 5) 3, afterWaiting 4,
        // exit 5.
        let bit = rawValue.trailingZeroBitCount
        return bit < 3 ? bit : min(bit - 2, 5)
    }

    public var description: String {
        let names: [(LooperActivity, String)] = [
            (.entry, "entry"), (.beforeTimers, "beforeTimers"), (.beforeSources, "beforeSources"),
            (.beforeWaiting, "beforeWaiting"), (.afterWaiting, "afterWaiting"), (.exit, "exit"),
        ]
        let present = names.filter { contains($0.0) }.map(\.1)
        return present.count == 1 ? present[0] : "[" + present.joined(separator: ", ") + "]"
    }
}
