import Synchronization

/// A name for a timer, source or posted block, shown in stall reports as "what the loop was running".
///
/// Labels are interned once into a process-wide table so the loop can publish the one it is running as a single
/// 32-bit atomic store, readable by the watchdog from another thread. Like metric labels, keep them few and static
/// (a literal or a `static let`): every distinct name stays in the table for the life of the process, which holds
/// at most 65,536 names; later ones share the label `"<too many labels>"`.
public struct LooperLabel: Hashable, Sendable, ExpressibleByStringLiteral, CustomStringConvertible {
    /// The interned index; 0 is the empty label.
    public let id: UInt32

    /// Interns `name`. Takes a lock; keep the label in a constant when it is used on a hot path.
    public init(_ name: String) {
        id = LabelTable.shared.intern(name)
    }

    public init(stringLiteral value: String) {
        self.init(value)
    }

    /// The label with interned index `id`, e.g. one read back from `Looper.currentLabelID`.
    public init(id: UInt32) {
        self.id = id
    }

    /// The empty label: nothing is running, or the work had no name.
    public static let none = LooperLabel(id: 0)

    /// The name this label was created with.
    public var name: String { LabelTable.shared.name(of: id) }

    public var description: String { name }
}

/// The process-wide intern table behind `LooperLabel`.
final class LabelTable: Sendable {
    static let shared = LabelTable()
    static let capacity = 65_536
    static let overflowName = "<too many labels>"

    private struct Storage {
        var ids: [String: UInt32] = ["": 0]
        var names: [String] = [""]
    }

    private let storage = Mutex(Storage())

    func intern(_ name: String) -> UInt32 {
        storage.withLock { storage in
            if let id = storage.ids[name] { return id }
            if storage.names.count >= Self.capacity {
                return storage.ids[Self.overflowName] ?? 0
            }
            let id = UInt32(storage.names.count)
            storage.ids[name] = id
            storage.names.append(name)
            if storage.names.count == Self.capacity - 1 {
                storage.ids[Self.overflowName] = UInt32(storage.names.count)
                storage.names.append(Self.overflowName)
            }
            return id
        }
    }

    func name(of id: UInt32) -> String {
        storage.withLock { storage in
            Int(id) < storage.names.count ? storage.names[Int(id)] : ""
        }
    }
}
