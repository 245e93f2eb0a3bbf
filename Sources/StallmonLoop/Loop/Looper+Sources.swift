import CStallmonLoopShims

// Posted blocks, executor jobs, descriptor sources and custom sources.
extension Looper {
    struct Job {
        enum Work {
            case block(@Sendable () -> Void)
            /// A Swift Concurrency job enqueued on the loop as an executor.
            case task(UnownedJob)
        }

        let label: LooperLabel
        let modes: UInt64
        let work: Work
    }

    struct FDRegistration {
        var reader: LooperFDSource?
        var writer: LooperFDSource?
        /// What epoll has for the descriptor now; 0: not registered (no source active in the running mode).
        var registeredEvents: UInt32 = 0

        func events(activeModes: UInt64) -> UInt32 {
            var events: UInt32 = 0
            if let reader, reader.modes & activeModes != 0 {
                events |= UInt32(CSTALLMON_EPOLLIN) | UInt32(CSTALLMON_EPOLLRDHUP)
            }
            if let writer, writer.modes & activeModes != 0 { events |= UInt32(CSTALLMON_EPOLLOUT) }
            return events
        }
    }

    /// Mode bits of work that runs in every mode: the loop's own bookkeeping.
    static let everyMode = UInt64.max

    // MARK: - Posting work

    /// Runs `block` on the loop thread during the next `beforeSources` phase of a pass in `mode`, in posting order.
    /// Safe from any thread; wakes the loop. The label names the block in stall reports.
    public func perform(label: LooperLabel = .perform, mode: LooperMode = .default,
                        _ block: @escaping @Sendable () -> Void) {
        enqueue(Job(label: label, modes: mode.bit, work: .block(block)))
    }

    /// Runs `block` during the next pass in any of `modes`, as `CFRunLoopPerformBlock` with an array of modes.
    public func perform(label: LooperLabel = .perform, modes: [LooperMode], _ block: @escaping @Sendable () -> Void) {
        enqueue(Job(label: label, modes: modes.reduce(0) { $0 | $1.bit }, work: .block(block)))
    }

    func enqueue(_ job: Job) {
        let wasEmpty = jobs.withLock { queue in
            queue.append(job)
            pendingJobModes.store(pendingJobModes.load(ordering: .relaxed) | job.modes, ordering: .releasing)
            return queue.count == 1
        }
        if wasEmpty && !isOnLoopThread { wakeUp() }
    }

    /// Runs `change` on the loop thread: now if this is the loop thread, else as the next posted block (in every
    /// mode, so that a registration is never held up by a nested run in another mode).
    func onLoopThread(_ change: @escaping @Sendable () -> Void) {
        if isOnLoopThread {
            change()
        } else {
            enqueue(Job(label: .internal, modes: Self.everyMode, work: .block(change)))
        }
    }

    func runPostedJobs() {
        let active = activeModes
        guard pendingJobModes.load(ordering: .acquiring) & active != 0 else { return }
        let batch = jobs.withLock { queue in
            if queue.allSatisfy({ $0.modes & active != 0 }) {
                pendingJobModes.store(0, ordering: .relaxed)
                let taken = queue
                queue.removeAll(keepingCapacity: true)
                return taken
            }
            var taken: [Job] = []
            var kept: [Job] = []
            var keptModes: UInt64 = 0
            for job in queue {
                if job.modes & active != 0 {
                    taken.append(job)
                } else {
                    kept.append(job)
                    keptModes |= job.modes
                }
            }
            queue = kept
            pendingJobModes.store(keptModes, ordering: .relaxed)
            return taken
        }
        guard !batch.isEmpty else { return }
        sourceHandled = true
        for job in batch {
            currentLabelStorage.store(job.label.id, ordering: .relaxed)
            switch job.work {
            case .block(let block):
                block()
            case .task(let task):
                task.runSynchronously(isolatedTo: asUnownedSerialExecutor(), taskExecutor: asUnownedTaskExecutor())
            }
        }
        currentLabelStorage.store(0, ordering: .relaxed)
    }

    // MARK: - File descriptors

    /// Calls `handler` on the loop thread whenever `fileDescriptor` is readable (or at end of file / error) and the
    /// loop runs in `mode`.
    @discardableResult
    public func addReader(_ fileDescriptor: Int32, label: LooperLabel = .fileDescriptor, mode: LooperMode = .default,
                          _ handler: @escaping @Sendable () -> Void) -> LooperFDSource {
        addFDSource(LooperFDSource(fileDescriptor: fileDescriptor, interest: .read, label: label, modes: mode.bit,
                                   loop: self, handler: handler))
    }

    /// Calls `handler` on the loop thread whenever `fileDescriptor` is writable and the loop runs in `mode`.
    @discardableResult
    public func addWriter(_ fileDescriptor: Int32, label: LooperLabel = .fileDescriptor, mode: LooperMode = .default,
                          _ handler: @escaping @Sendable () -> Void) -> LooperFDSource {
        addFDSource(LooperFDSource(fileDescriptor: fileDescriptor, interest: .write, label: label, modes: mode.bit,
                                   loop: self, handler: handler))
    }

    private func addFDSource(_ source: LooperFDSource) -> LooperFDSource {
        onLoopThread { [weak self] in
            guard let self, source.isValid else { return }
            let fd = source.fileDescriptor
            var registration = fdRegistrations[fd] ?? FDRegistration()
            let previous = registration
            switch source.interest {
            case .read: registration.reader = source
            case .write: registration.writer = source
            }
            if updateInterest(fd, &registration) {
                fdRegistrations[fd] = registration
            } else {
                // e.g. a regular file, which epoll refuses (EPERM), or a closed descriptor
                fdRegistrations[fd] = previous.reader == nil && previous.writer == nil ? nil : previous
                source.cancel()
            }
        }
        return source
    }

    func removeFDSource(_ source: LooperFDSource) {
        onLoopThread { [weak self] in
            guard let self, var registration = fdRegistrations[source.fileDescriptor] else { return }
            let fd = source.fileDescriptor
            if registration.reader === source { registration.reader = nil }
            if registration.writer === source { registration.writer = nil }
            _ = updateInterest(fd, &registration)
            fdRegistrations[fd] = registration.reader == nil && registration.writer == nil ? nil : registration
        }
    }

    /// Brings epoll in line with the sources of `fd` active in the running mode: added, modified, or removed when
    /// none is (a descriptor left registered with no events would still report hang-ups and spin the loop).
    /// Returns false when epoll refused the descriptor.
    func updateInterest(_ fd: Int32, _ registration: inout FDRegistration) -> Bool {
        let wanted = registration.events(activeModes: activeModes)
        guard wanted != registration.registeredEvents else { return true }
        let token = UInt64(UInt32(bitPattern: fd))
        let rc: Int32
        if wanted == 0 {
            rc = cstallmon_epoll_remove(epollFD, fd)
        } else if registration.registeredEvents == 0 {
            rc = cstallmon_epoll_add(epollFD, fd, wanted, token)
        } else {
            rc = cstallmon_epoll_modify(epollFD, fd, wanted, token)
        }
        guard rc == 0 || wanted == 0 else { return false }
        registration.registeredEvents = wanted
        return true
    }

    /// After a change of the active modes: re-registers every descriptor for them.
    func applyDescriptorInterests() {
        for fd in Array(fdRegistrations.keys) {
            guard var registration = fdRegistrations[fd] else { continue }
            _ = updateInterest(fd, &registration)
            fdRegistrations[fd] = registration
        }
    }

    func dispatchReadyDescriptors(count: Int) {
        // A handler that runs a nested loop reuses `readyEvents`; the rest of this batch is then stale, and, being
        // level-triggered, reported again on the next pass if still ready.
        let generation = nestedRunCount
        let active = activeModes
        for index in 0..<count {
            guard nestedRunCount == generation else { break }
            let event = readyEvents[index]
            if event.token == Self.wakeToken {
                _ = cstallmon_eventfd_drain(wakeFD)
                continue
            }
            let fd = Int32(bitPattern: UInt32(truncatingIfNeeded: event.token))
            guard let registration = fdRegistrations[fd] else { continue }
            let failure = UInt32(CSTALLMON_EPOLLERR) | UInt32(CSTALLMON_EPOLLHUP)
            let readable = UInt32(CSTALLMON_EPOLLIN) | UInt32(CSTALLMON_EPOLLRDHUP) | failure
            if event.events & readable != 0, let reader = registration.reader, reader.isValid,
               reader.modes & active != 0
            {
                currentLabelStorage.store(reader.label.id, ordering: .relaxed)
                sourceHandled = true
                reader.handler()
            }
            if nestedRunCount == generation, event.events & (UInt32(CSTALLMON_EPOLLOUT) | failure) != 0,
               let writer = fdRegistrations[fd]?.writer, writer.isValid, writer.modes & active != 0
            {
                currentLabelStorage.store(writer.label.id, ordering: .relaxed)
                sourceHandled = true
                writer.handler()
            }
        }
        currentLabelStorage.store(0, ordering: .relaxed)
    }

    // MARK: - Custom sources

    /// Adds a manually signalled source; call `signal()` on the result to have `handler` run on the loop thread
    /// during the next pass in `mode`.
    @discardableResult
    public func addCustomSource(label: LooperLabel = .customSource, mode: LooperMode = .default,
                                _ handler: @escaping @Sendable () -> Void) -> LooperCustomSource {
        let source = LooperCustomSource(label: label, modes: mode.bit, loop: self, handler: handler)
        onLoopThread { [weak self] in
            if source.isValid { self?.customSources.append(source) }
        }
        return source
    }

    func customSourceSignalled() {
        customSignalled.store(true, ordering: .releasing)
        if !isOnLoopThread { wakeUp() }
    }

    func removeCustomSource(_ source: LooperCustomSource) {
        onLoopThread { [weak self] in self?.customSources.removeAll { $0 === source } }
    }

    /// Runs the signalled sources of the active modes; signals of sources in other modes stay pending until the
    /// loop runs in one of theirs (a change of mode has the next pass look again).
    func runSignalledCustomSources() {
        guard customSignalled.exchange(false, ordering: .acquiring) else { return }
        let active = activeModes
        for source in customSources where source.isValid && source.modes & active != 0 && source.takePending() {
            currentLabelStorage.store(source.label.id, ordering: .relaxed)
            sourceHandled = true
            source.handler()
        }
        currentLabelStorage.store(0, ordering: .relaxed)
    }
}
