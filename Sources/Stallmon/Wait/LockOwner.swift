import CStallmonCapture

#if canImport(Glibc)
import Glibc
#endif

/// Who holds the lock a futex wait is for, where the lock records its owner. Checked against the glibc and Swift
/// sources before it is trusted, and read without faulting (`cstallmon_read_own_memory`): the word may belong to
/// memory another thread frees meanwhile.
///
/// - glibc `pthread_mutex_t` (and NIO's `NIOLock`, Foundation's `NSLock`, built on it): `pthread_mutex_lock`
///   waits with `FUTEX_WAIT` for the value 2 on `__lock`, the mutex's first word; `__owner`, the holder's tid, is
///   the third (nptl `struct __pthread_mutex_s`: `__lock`, `__count`, `__owner`, `__nusers`, `__kind`).
/// - Swift's `Synchronization.Mutex` on Linux (and priority-inheritance pthread mutexes): `FUTEX_LOCK_PI`, whose
///   word holds the owner's tid (`FUTEX_TID_MASK`) by kernel contract.
/// - Anything else (condition variables, semaphores, other futex users): the owner is unknown, and said so.
package enum LockOwner {
    /// A lock whose holder was found.
    package struct Holder: Hashable, Sendable {
        package var kind: String
        package var tid: Int32
    }

    static let futexWait = 0
    static let futexLockPI = 6
    static let futexLockPI2 = 13
    static let tidMask: UInt32 = 0x3fff_ffff

    /// The lock `call` (a futex call of thread `waiter`) waits for and its holder, or nil when the word is not a
    /// lock that records its owner. `read` copies memory without faulting.
    package static func holder(of call: SystemCall, waiter: Int32,
                       read: (UInt64, Int) -> [UInt8]? = readOwnMemory) -> Holder? {
        guard call.arguments.count >= 3 else { return nil }
        let address = call.arguments[0]
        let command = Int(call.arguments[1] & 0x7f)  // without FUTEX_PRIVATE_FLAG (128) and FUTEX_CLOCK_REALTIME (256)
        switch command {
        case futexLockPI, futexLockPI2:
            guard let bytes = read(address, 4) else { return nil }
            let owner = Int32(bitPattern: word(bytes, 0) & tidMask)
            guard owner > 0, owner != waiter else { return nil }
            return Holder(kind: "Mutex (priority-inheritance futex)", tid: owner)
        case futexWait where call.arguments[2] == 2:
            guard let bytes = read(address, 20) else { return nil }
            let lock = word(bytes, 0)
            let count = word(bytes, 4)
            let owner = Int32(bitPattern: word(bytes, 8))
            let users = word(bytes, 12)
            let kind = word(bytes, 16)
            // A locked, contended mutex as nptl leaves it; anything else is another futex user.
            guard lock == 1 || lock == 2, count < 1 << 20, owner > 0, owner != waiter, users >= 1, kind < 0x400 else {
                return nil
            }
            return Holder(kind: "pthread mutex", tid: owner)
        default:
            return nil
        }
    }

    private static func word(_ bytes: [UInt8], _ offset: Int) -> UInt32 {
        UInt32(bytes[offset]) | UInt32(bytes[offset + 1]) << 8 | UInt32(bytes[offset + 2]) << 16
            | UInt32(bytes[offset + 3]) << 24
    }

    static func readOwnMemory(_ address: UInt64, _ length: Int) -> [UInt8]? {
        guard address != 0, address <= UInt64(UInt.max) else { return nil }
        var bytes = [UInt8](repeating: 0, count: length)
        let result = bytes.withUnsafeMutableBytes { cstallmon_read_own_memory(UInt(address), $0.baseAddress, length) }
        return result == 0 ? bytes : nil
    }
}
