import CStallmonLoopShims

#if canImport(Glibc)
import Glibc
#endif

// The run: entering a mode, the passes, and leaving it. Everything here runs on the loop thread.
extension Looper {
    func runLoop(mode: LooperMode, deadline: UInt64?, returnAfterSourceHandled: Bool,
                 finishWhenEmpty: Bool) -> LooperRunResult {
        let nested = isOnLoopThread
        // A loop run from inside another loop's callback on this thread: that loop is current again afterwards.
        let previousCurrent = nested ? nil : cstallmon_loop_current()
        if !nested {
            guard !running.exchange(true, ordering: .acquiringAndReleasing) else { return .runningOnAnotherThread }
            loopThreadHandle.store(UInt(pthread_self()), ordering: .relaxed)
            loopThreadIDStorage.store(cstallmon_gettid(), ordering: .releasing)
            cstallmon_loop_set_current(Unmanaged.passUnretained(self).toOpaque())
        }
        if nested { nestedRunCount &+= 1 }
        let outerMode = runMode
        let outerLabel = currentLabelStorage.load(ordering: .relaxed)
        enter(mode)
        defer {
            enter(outerMode)
            if nested {
                currentLabelStorage.store(outerLabel, ordering: .relaxed)
            } else {
                currentLabelStorage.store(0, ordering: .relaxed)
                cstallmon_loop_set_current(previousCurrent)
                loopThreadHandle.store(0, ordering: .relaxed)
                running.store(false, ordering: .releasing)
            }
        }
        if finishWhenEmpty && modeIsEmpty() { return .finished }

        refreshRegistrySnapshot()
        var now = cstallmon_monotonic_ns()
        if nested {
            // The callback's work so far ends here; each nested pass is an iteration of its own.
            forEachProbe { $0.loopIdles(at: now) }
        } else {
            forEachAttachment { $0.bindThread() }
        }
        dispatchObservers(.entry, now: now)
        let result: LooperRunResult
        while true {
            if stopRequested.exchange(false, ordering: .acquiring) {
                result = .stopped
                break
            }
            if finishWhenEmpty && modeIsEmpty() {
                result = .finished
                break
            }
            // `run(until:)` returns at once when the deadline has passed; `run(in:for:)` polls once first, as
            // CFRunLoopRunInMode with 0 seconds does.
            if !finishWhenEmpty, let deadline, cstallmon_monotonic_ns() >= deadline {
                result = .timedOut
                break
            }
            sourceHandled = false
            runPass(deadline: deadline)
            if returnAfterSourceHandled && sourceHandled {
                result = .handledSource
                break
            }
            if let deadline, cstallmon_monotonic_ns() >= deadline {
                result = .timedOut
                break
            }
        }
        refreshRegistrySnapshot()
        now = cstallmon_monotonic_ns()
        dispatchObservers(.exit, now: now)
        if nested {
            // Back in the callback that ran the nested loop: its remaining work is busy again.
            forEachProbe { $0.loopWoke(at: now) }
        } else {
            forEachProbe { $0.loopIdles(at: now) }
        }
        return result
    }

    /// Makes `mode` the one the loop runs in: publishes it and, when the active modes change, re-registers the
    /// descriptors for them and has the next pass look at every signalled custom source.
    func enter(_ mode: LooperMode) {
        runMode = mode
        currentModeStorage.store(mode.id, ordering: .relaxed)
        refreshActiveModes()
    }

    /// Recomputes the active modes (the common set may have grown meanwhile).
    @inline(__always)
    func refreshActiveModes() {
        let common = commonModeMask.load(ordering: .relaxed)
        let bit = runMode.bit
        let active = bit | (common & bit != 0 ? LooperMode.common.bit : 0)
        guard active != activeModes else { return }
        activeModes = active
        customSignalled.store(true, ordering: .relaxed)
        applyDescriptorInterests()
    }

    /// True when the active modes have no timer, descriptor source, custom source or posted block.
    func modeIsEmpty() -> Bool {
        let active = activeModes
        if pendingJobModes.load(ordering: .acquiring) & active != 0 { return false }
        if timers.contains(where: { $0.timer.modes & active != 0 && $0.timer.isValid }) { return false }
        if customSources.contains(where: { $0.modes & active != 0 && $0.isValid }) { return false }
        for registration in fdRegistrations.values where registration.events(activeModes: active) != 0 {
            return false
        }
        return true
    }

    func runPass(deadline: UInt64?) {
        var now = cstallmon_monotonic_ns()
        refreshRegistrySnapshot()
        refreshActiveModes()
        forEachProbe { $0.passBegins(at: now) }
        dispatchObservers(.beforeTimers, now: now)
        fireDueTimers(now: now)

        refreshRegistrySnapshot()
        dispatchObservers(.beforeSources, now: nil)
        runPostedJobs()
        runSignalledCustomSources()

        // Sleep only when nothing is pending; otherwise poll the descriptors and come straight back.
        now = cstallmon_monotonic_ns()
        var timeout = waitTimeout(deadline: deadline, now: now)
        let sleeps = timeout != 0
        currentLabelStorage.store(0, ordering: .relaxed)
        if sleeps {
            refreshRegistrySnapshot()
            forEachProbe { $0.loopIdles(at: now) }
            dispatchObservers(.beforeWaiting, now: now)
            // A beforeWaiting observer may have posted a block, signalled a source, scheduled a timer or called
            // stop() on this thread, which does not wake the loop: decide again so that the wait cannot sleep
            // through it.
            if hasObservers(.beforeWaiting) {
                timeout = waitTimeout(deadline: deadline, now: cstallmon_monotonic_ns())
            }
        }
        let count = waitForEvents(timeoutNanoseconds: timeout)
        if sleeps {
            refreshRegistrySnapshot()
            if observerSnapshot.probe != nil || hasObservers(.afterWaiting) {
                let woke = cstallmon_monotonic_ns()
                forEachProbe { $0.loopWoke(at: woke) }
                dispatchObservers(.afterWaiting, now: woke)
            }
        }
        dispatchReadyDescriptors(count: count)
    }

    /// How long the pass may wait in epoll: 0 (poll) when work is pending or a timer or the deadline is due, -1
    /// when nothing bounds the sleep, else the nanoseconds until the next timer wake or the deadline.
    func waitTimeout(deadline: UInt64?, now: UInt64) -> Int64 {
        let workPending = pendingJobModes.load(ordering: .acquiring) & activeModes != 0
            || customSignalled.load(ordering: .acquiring) || stopRequested.load(ordering: .acquiring)
        if workPending { return 0 }
        var wakeAt = nextTimerWake()
        if let deadline { wakeAt = min(wakeAt ?? deadline, deadline) }
        guard let wakeAt else { return -1 }
        return wakeAt > now ? Int64(clamping: wakeAt - now) : 0
    }

    /// epoll wait, retrying EINTR (our own sampling signal interrupts it even with SA_RESTART) for the time left.
    func waitForEvents(timeoutNanoseconds: Int64) -> Int {
        let start = timeoutNanoseconds > 0 ? cstallmon_monotonic_ns() : 0
        var remaining = timeoutNanoseconds
        while true {
            let count = readyEvents.withUnsafeMutableBufferPointer { buffer in
                cstallmon_epoll_wait(epollFD, buffer.baseAddress, Int32(buffer.count), remaining)
            }
            if count >= 0 { return Int(count) }
            guard errno == EINTR else { return 0 }
            if timeoutNanoseconds > 0 {
                let elapsed = Int64(clamping: cstallmon_monotonic_ns() - start)
                remaining = max(0, timeoutNanoseconds - elapsed)
            }
        }
    }
}
