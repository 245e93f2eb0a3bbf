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

    public static let entry = LooperActivity(rawValue: 1 << 0)
    public static let beforeTimers = LooperActivity(rawValue: 1 << 1)
    public static let beforeSources = LooperActivity(rawValue: 1 << 2)
    public static let beforeWaiting = LooperActivity(rawValue: 1 << 5)
    public static let afterWaiting = LooperActivity(rawValue: 1 << 6)
    public static let exit = LooperActivity(rawValue: 1 << 7)
    public static let allActivities: LooperActivity = [
        .entry, .beforeTimers, .beforeSources, .beforeWaiting, .afterWaiting, .exit,
    ]

    /// The single activities in loop order.
    public static let ordered: [LooperActivity] = [
        .entry, .beforeTimers, .beforeSources, .beforeWaiting, .afterWaiting, .exit,
    ]

    /// Position of a single activity in `ordered`; used to index per-activity observer lists.
    var bucket: Int {
        switch self {
        case .entry: 0
        case .beforeTimers: 1
        case .beforeSources: 2
        case .beforeWaiting: 3
        case .afterWaiting: 4
        default: 5
        }
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
