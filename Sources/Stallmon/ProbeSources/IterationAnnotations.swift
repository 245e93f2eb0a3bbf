import Synchronization

/// Key/values the service attaches to the iteration in progress (`LooperStallMonitor.annotate`). Written by the service
/// on the loop thread, read by the watchdog; the lock is the service's cost, taken only when it annotates.
final class IterationAnnotations: Sendable {
    private let storage = Mutex<(iteration: UInt64, values: [String: String])>((0, [:]))

    func set(_ key: String, _ value: String, iteration: UInt64) {
        storage.withLock { storage in
            if storage.iteration != iteration { storage = (iteration, [:]) }
            if storage.values.count < 32 || storage.values[key] != nil {
                storage.values[key] = String(value.prefix(256))
            }
        }
    }

    func values(for iteration: UInt64) -> [String: String] {
        storage.withLock { $0.iteration == iteration ? $0.values : [:] }
    }
}
