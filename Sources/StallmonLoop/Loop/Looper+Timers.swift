import CStallmonLoopShims

// Timers: a list sorted latest first, so the soonest is `last` and firing removes from the end.
extension Looper {
    struct TimerEntry {
        var fireAt: UInt64
        var sequence: UInt64
        let timer: LooperTimer
        var latestWake: UInt64 { fireAt &+ UInt64(max(0, timer.tolerance.nanosecondsClamped)) }
    }

    /// Fires `block` once, `delay` from now, at most `tolerance` late, when the loop runs in `mode` (a timer due
    /// while the loop runs in another mode waits until it returns to one of the timer's).
    @discardableResult
    public func schedule(after delay: Duration, tolerance: Duration = .zero, label: LooperLabel = .timer,
                         mode: LooperMode = .default, _ block: @escaping @Sendable () -> Void) -> LooperTimer {
        let timer = LooperTimer(label: label, interval: nil, tolerance: tolerance, modes: mode.bit, loop: self,
                                block: block)
        let fireAt = MonotonicInstant.now().advanced(by: delay).nanoseconds
        onLoopThread { [weak self] in self?.insertTimer(TimerEntry(fireAt: fireAt, sequence: 0, timer: timer)) }
        return timer
    }

    /// Fires `block` every `interval`, first after `initialDelay` (default: one interval), at most `tolerance` late,
    /// when the loop runs in `mode`. Firings missed while the loop was busy or in another mode are skipped, not
    /// queued up.
    @discardableResult
    public func schedule(every interval: Duration, initialDelay: Duration? = nil, tolerance: Duration = .zero,
                         label: LooperLabel = .timer, mode: LooperMode = .default,
                         _ block: @escaping @Sendable () -> Void) -> LooperTimer {
        precondition(interval > .zero, "a repeating timer needs a positive interval")
        let timer = LooperTimer(label: label, interval: interval, tolerance: tolerance, modes: mode.bit, loop: self,
                                block: block)
        let fireAt = MonotonicInstant.now().advanced(by: initialDelay ?? interval).nanoseconds
        onLoopThread { [weak self] in self?.insertTimer(TimerEntry(fireAt: fireAt, sequence: 0, timer: timer)) }
        return timer
    }

    func removeTimer(_ timer: LooperTimer) {
        onLoopThread { [weak self] in self?.timers.removeAll { $0.timer === timer } }
    }

    func insertTimer(_ entry: TimerEntry) {
        guard entry.timer.isValid else { return }
        var entry = entry
        timerSequence &+= 1
        entry.sequence = timerSequence
        // Latest first: find the first index whose entry fires earlier than the new one (ties: older fires first).
        var low = 0
        var high = timers.count
        while low < high {
            let mid = (low + high) / 2
            let other = timers[mid]
            if other.fireAt > entry.fireAt || (other.fireAt == entry.fireAt && other.sequence > entry.sequence) {
                low = mid + 1
            } else {
                high = mid
            }
        }
        timers.insert(entry, at: low)
    }

    /// Fires every timer of the active modes due at `now`. Returns after at most the timers that were due on entry;
    /// due timers of other modes stay where they are.
    func fireDueTimers(now: UInt64) {
        guard let soonest = timers.last, soonest.fireAt <= now else { return }
        let active = activeModes
        var firing: [TimerEntry] = []
        var index = timers.count - 1
        while index >= 0 && timers[index].fireAt <= now {
            if timers[index].timer.modes & active != 0 { firing.append(timers.remove(at: index)) }
            index -= 1
        }
        for entry in firing where entry.timer.isValid {
            let timer = entry.timer
            currentLabelStorage.store(timer.label.id, ordering: .relaxed)
            if let interval = timer.interval {
                let period = UInt64(max(1, interval.nanosecondsClamped))
                var next = entry.fireAt &+ period
                if next <= now { next = now &+ period - ((now - entry.fireAt) % period) }  // skip missed firings
                insertTimer(TimerEntry(fireAt: next, sequence: 0, timer: timer))
            } else {
                timer.invalidateAfterFiring()
            }
            timer.block()
        }
        currentLabelStorage.store(0, ordering: .relaxed)
    }

    /// The latest time the loop may sleep until without firing a timer of the active modes later than its
    /// tolerance allows.
    func nextTimerWake() -> UInt64? {
        let active = activeModes
        var wake: UInt64?
        for entry in timers.reversed() where entry.timer.modes & active != 0 {
            if let current = wake, entry.fireAt >= current { break }  // sorted: nothing later lowers the wake time
            wake = min(wake ?? .max, entry.latestWake)
        }
        return wake
    }
}
