import StallmonLoop
import Testing

/// Something that happened on the loop thread, in order: an observer call or a marker from a callout.
enum LoopEvent: Sendable, Equatable, CustomStringConvertible {
    case activity(LooperActivity)
    case timer
    case job

    var description: String {
        switch self {
        case .activity(let activity): activity.description
        case .timer: "<timer>"
        case .job: "<job>"
        }
    }
}

/// Checks the documented shape of a run: `entry`, then passes of
/// `beforeTimers → beforeSources → (beforeWaiting → afterWaiting)?`, then `exit`.
/// Returns a description of the first violation, or nil.
func passStructureViolation(_ log: [LooperActivity]) -> String? {
    guard log.first == .entry else { return "the first activity is \(String(describing: log.first)), not entry" }
    guard log.last == .exit else { return "the last activity is \(String(describing: log.last)), not exit" }
    var previous = LooperActivity.entry
    for (index, activity) in log.enumerated().dropFirst() {
        let allowed: [LooperActivity]
        switch previous {
        case .entry: allowed = [.beforeTimers, .exit]
        case .beforeTimers: allowed = [.beforeSources]
        case .beforeSources: allowed = [.beforeWaiting, .beforeTimers, .exit]
        case .beforeWaiting: allowed = [.afterWaiting]
        case .afterWaiting: allowed = [.beforeTimers, .exit]
        default: allowed = []  // nothing may follow exit
        }
        guard allowed.contains(activity) else {
            return "\(activity) follows \(previous) at index \(index) (allowed: \(allowed))"
        }
        previous = activity
    }
    return nil
}

@Suite("LooperActivity values")
struct LooperActivityValueTests {
    @Test("bit values match CFRunLoop's")
    func cfRunLoopBitValues() {
        #expect(LooperActivity.entry.rawValue == 1)
        #expect(LooperActivity.beforeTimers.rawValue == 2)
        #expect(LooperActivity.beforeSources.rawValue == 4)
        #expect(LooperActivity.beforeWaiting.rawValue == 32)
        #expect(LooperActivity.afterWaiting.rawValue == 64)
        #expect(LooperActivity.exit.rawValue == 128)
        #expect(LooperActivity.allActivities.rawValue == 1 | 2 | 4 | 32 | 64 | 128)
    }

    @Test("ordered lists each single activity once, in loop order")
    func orderedIsLoopOrder() {
        #expect(LooperActivity.ordered == [.entry, .beforeTimers, .beforeSources, .beforeWaiting, .afterWaiting, .exit])
        #expect(LooperActivity(LooperActivity.ordered) == .allActivities)
    }

    @Test("description names single activities and lists sets")
    func descriptions() {
        #expect(LooperActivity.beforeWaiting.description == "beforeWaiting")
        #expect(LooperActivity.entry.description == "entry")
        #expect(LooperActivity([.exit, .entry]).description == "[entry, exit]")
        #expect(LooperActivity([]).description == "[]")
    }
}

@Suite("Activity order per pass", .serialized)
struct LooperActivityOrderTests {
    @Test("entry first, exit last, passes in beforeTimers → beforeSources → beforeWaiting → afterWaiting order")
    func activityOrderAroundATimer() throws {
        let loop = try Looper(name: "activity-order")
        let log = Locked<[LoopEvent]>([])
        let instants = Locked<[MonotonicInstant]>([])
        loop.addObserver(for: .allActivities) { activity, now in
            log.append(LoopEvent.activity(activity))
            instants.append(now)
        }
        let fired = Counter()
        loop.schedule(after: .milliseconds(30)) {
            fired.increment()
            log.append(LoopEvent.timer)
            loop.stop()
        }
        runBounded(loop) { $0.run(for: .seconds(2)) }

        let events = log.value
        let activities = events.compactMap { event -> LooperActivity? in
            if case .activity(let activity) = event { return activity }
            return nil
        }
        #expect(fired.value == 1)
        #expect(passStructureViolation(activities) == nil, "\(events)")
        #expect(activities.filter { $0 == .entry }.count == 1)
        #expect(activities.filter { $0 == .exit }.count == 1)
        // The loop slept while waiting for the timer, and every sleep is bracketed.
        let waits = activities.filter { $0 == .beforeWaiting }.count
        #expect(waits >= 1)
        #expect(waits == activities.filter { $0 == .afterWaiting }.count)
        // Never two beforeWaiting without an afterWaiting between them.
        let sleeps = activities.filter { $0 == .beforeWaiting || $0 == .afterWaiting }
        for (index, activity) in sleeps.enumerated() {
            #expect(activity == (index.isMultiple(of: 2) ? .beforeWaiting : .afterWaiting), "\(sleeps)")
        }
        // The timer fired between beforeTimers and beforeSources of its pass.
        let timerIndex = try #require(events.firstIndex(of: .timer))
        #expect(timerIndex > 0 && events[timerIndex - 1] == .activity(.beforeTimers), "\(events)")
        #expect(timerIndex + 1 < events.count && events[timerIndex + 1] == .activity(.beforeSources), "\(events)")
        // The instants handed to observers never go backwards.
        let times = instants.value
        #expect(zip(times, times.dropFirst()).allSatisfy { $0 <= $1 })
    }

    @Test("while work is pending the loop polls: no beforeWaiting/afterWaiting, one block per pass")
    func pendingWorkPolls() throws {
        let loop = try Looper(name: "activity-polling")
        let log = Locked<[LoopEvent]>([])
        loop.addObserver(for: .allActivities) { activity, _ in log.append(LoopEvent.activity(activity)) }
        let remaining = Counter()
        let total = 20
        @Sendable func step() {
            log.append(LoopEvent.job)
            if remaining.increment() < total {
                loop.perform(step)  // posted from inside a block: runs on the next pass
            } else {
                loop.stop()
            }
        }
        loop.perform(step)
        let returned = runBounded(loop) { $0.run(for: .seconds(2)) }
        #expect(returned)

        let events = log.value
        #expect(remaining.value == total)
        #expect(!events.contains(.activity(.beforeWaiting)), "\(events)")
        #expect(!events.contains(.activity(.afterWaiting)), "\(events)")
        let activities = events.compactMap { event -> LooperActivity? in
            if case .activity(let activity) = event { return activity }
            return nil
        }
        #expect(passStructureViolation(activities) == nil, "\(events)")
        // Each re-posted block ran in its own pass (a block posted during a batch waits for the next pass).
        let jobIndices = events.indices.filter { events[$0] == .job }
        #expect(jobIndices.count == total)
        for (earlier, later) in zip(jobIndices, jobIndices.dropFirst()) {
            let between = events[earlier..<later]
            #expect(between.filter { $0 == .activity(.beforeTimers) }.count == 1, "\(Array(between))")
            #expect(events[later - 1] == .activity(.beforeSources))
        }
    }

    @Test("stop() before run gives entry then exit and no pass")
    func stoppedRunIsEntryThenExit() throws {
        let loop = try Looper(name: "activity-stopped")
        let log = Locked<[LooperActivity]>([])
        loop.addObserver(for: .allActivities) { activity, _ in log.append(activity) }
        loop.stop()
        runBounded(loop) { $0.run() }
        #expect(log.value == [.entry, .exit])
    }
}
