import Synchronization

/// A run-loop mode, as CFRunLoop has them: a loop keeps its timers, sources, observers and posted blocks per mode
/// and runs in one mode at a time, so work added in one mode waits while the loop runs in another.
///
/// `.default` is where everything goes unless told otherwise. `.common` is not a mode the loop runs in but the set
/// of modes named by `Looper.addCommonMode(_:)` (`.default` from the start): an item added for `.common` belongs to
/// every mode in that set, including modes added to it later.
///
/// Modes are interned by name into a process-wide table of at most 63 names besides `.common` (like CFRunLoop's,
/// modes are a program's constants, not data); creating a 64th distinct mode is a programming error and traps.
public struct LooperMode: Hashable, Sendable, ExpressibleByStringLiteral, CustomStringConvertible {
    /// The mode's index in the process-wide table (0 is `.default`, 63 is `.common`).
    public let id: UInt8

    @usableFromInline
    init(id: UInt8) {
        self.id = id
    }

    /// The mode named `name` ("default" and "common" are `.default` and `.common`). Takes a lock; keep modes in
    /// constants.
    public init(_ name: String) {
        id = ModeTable.shared.intern(name)
    }

    public init(stringLiteral value: String) {
        self.init(value)
    }

    /// The mode a loop runs in unless told otherwise.
    @inlinable public static var `default`: LooperMode { LooperMode(id: 0) }
    /// The common modes: items added for it belong to every mode in the loop's common set.
    @inlinable public static var common: LooperMode { LooperMode(id: 63) }

    /// The name the mode was created with.
    public var name: String { ModeTable.shared.name(of: id) }

    public var description: String { name }

    /// This mode's bit in a mode mask.
    @inline(__always)
    var bit: UInt64 { 1 << UInt64(id) }
}

/// The process-wide intern table behind `LooperMode`.
final class ModeTable: Sendable {
    static let shared = ModeTable()
    static let commonID: UInt8 = 63

    private struct Storage {
        var ids: [String: UInt8] = ["default": 0, "common": 63]
        var names: [String] = ["default"]
    }

    private let storage = Mutex(Storage())

    func intern(_ name: String) -> UInt8 {
        storage.withLock { storage in
            if let id = storage.ids[name] { return id }
            precondition(storage.names.count < Int(Self.commonID),
                         "LooperMode: at most 63 distinct modes per process; \"\(name)\" would be the 64th")
            let id = UInt8(storage.names.count)
            storage.ids[name] = id
            storage.names.append(name)
            return id
        }
    }

    func name(of id: UInt8) -> String {
        if id == Self.commonID { return "common" }
        return storage.withLock { Int(id) < $0.names.count ? $0.names[Int(id)] : "" }
    }
}
