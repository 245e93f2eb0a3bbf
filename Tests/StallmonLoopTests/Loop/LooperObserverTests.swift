import StallmonLoop
import Synchronization
import Testing

/// An observer owner for `addObserver(owner:)`.
final class Owner: Sendable {
    let calls = Counter()
    init() {}
}

@Suite("Looper observers", .serialized)
struct LooperObserverTests {
    // MARK: - Ordering

    @Test("observers run lowest order first, then in registration order")
    func orderThenRegistration() throws {
        let loop = try Looper(name: "observer-order")
        let orders = [5, -3, 0, 5, 0, -3, Int.min, Int.max, 0, 1]
        let calls = Locked<[(LooperActivity, Int)]>([])
        for (index, order) in orders.enumerated() {
            loop.addObserver(for: [.entry, .exit], order: order) { activity, _ in
                calls.append((activity, index))
            }
        }
        loop.stop()
        runBounded(loop) { $0.run() }

        // Stable sort by order = lowest order first, registration order among equals.
        let expected = orders.indices.sorted { orders[$0] < orders[$1] || (orders[$0] == orders[$1] && $0 < $1) }
        #expect(expected == [6, 1, 5, 2, 4, 8, 9, 0, 3, 7])
        let recorded = calls.value
        #expect(recorded.filter { $0.0 == .entry }.map(\.1) == expected)
        #expect(recorded.filter { $0.0 == .exit }.map(\.1) == expected)
        #expect(recorded.count == 2 * orders.count)
    }

    @Test("observers get only the activities they registered for")
    func activityFiltering() throws {
        let loop = try Looper(name: "observer-filter")
        let seen = Locked<[LooperActivity]>([])
        loop.addObserver(for: [.beforeSources, .exit]) { activity, _ in seen.append(activity) }
        loop.perform { loop.stop() }
        runBounded(loop) { $0.run(for: .seconds(2)) }
        let activities = seen.value
        #expect(activities.last == .exit)
        #expect(activities.filter { $0 == .exit }.count == 1)
        #expect(activities.contains(.beforeSources))
        #expect(activities.allSatisfy { $0 == .beforeSources || $0 == .exit })
    }

    // MARK: - Removal

    @Test("removeObserver stops further calls")
    func removeStopsCalls() throws {
        let loop = try Looper(name: "observer-remove")
        let calls = Counter()
        let token = loop.addObserver(for: .entry) { _, _ in calls.increment() }
        #expect(loop.observerCount == 1)
        loop.stop()
        runBounded(loop) { $0.run() }
        #expect(calls.value == 1)

        loop.removeObserver(token)
        #expect(loop.observerCount == 0)
        loop.removeObserver(token)  // twice is harmless
        #expect(loop.observerCount == 0)
        loop.stop()
        runBounded(loop) { $0.run() }
        #expect(calls.value == 1)
    }

    @Test("removeObserver from another thread while the loop runs stops calls")
    func removeFromAnotherThread() throws {
        let loop = try Looper(name: "observer-remove-thread")
        let calls = Counter()
        let token = loop.addObserver(for: .beforeTimers) { _, _ in calls.increment() }
        let background = BackgroundLoop(loop)
        let ticker = loop.schedule(every: .milliseconds(2)) {}
        #expect(waitUntil { calls.value >= 3 })
        loop.removeObserver(token)
        background.sync()  // any call in flight when removeObserver returned has finished by now
        let afterRemoval = calls.value
        pause(.milliseconds(40))
        #expect(calls.value == afterRemoval)
        ticker.cancel()
        background.stop()
    }

    @Test("an observer removed by an earlier observer is not called later in the same dispatch")
    func removalDuringDispatch() throws {
        let loop = try Looper(name: "observer-remove-during")
        let victimCalls = Locked<[LooperActivity]>([])
        let bystanderCalls = Locked<[LooperActivity]>([])
        let victimToken = Locked<LooperObserverToken?>(nil)
        loop.addObserver(for: .entry, order: 0) { _, _ in
            if let token = victimToken.value { loop.removeObserver(token) }
        }
        victimToken.withLock {
            $0 = loop.addObserver(for: [.entry, .exit], order: 1) { activity, _ in victimCalls.append(activity) }
        }
        loop.addObserver(for: [.entry, .exit], order: 2) { activity, _ in bystanderCalls.append(activity) }
        #expect(loop.observerCount == 3)
        loop.stop()
        runBounded(loop) { $0.run() }
        #expect(victimCalls.value.isEmpty)
        // The removal did not disturb the rest of the dispatch.
        #expect(bystanderCalls.value == [.entry, .exit])
        #expect(loop.observerCount == 2)
    }

    @Test("an observer can remove itself; the next observer in the dispatch still runs")
    func selfRemoval() throws {
        let loop = try Looper(name: "observer-remove-self")
        let selfCalls = Counter()
        let nextCalls = Locked<[LooperActivity]>([])
        let token = Locked<LooperObserverToken?>(nil)
        token.withLock {
            $0 = loop.addObserver(for: .allActivities, order: 0) { _, _ in
                selfCalls.increment()
                if let token = token.value { loop.removeObserver(token) }
            }
        }
        loop.addObserver(for: [.entry, .exit], order: 0) { activity, _ in nextCalls.append(activity) }
        loop.perform { loop.stop() }
        runBounded(loop) { $0.run(for: .seconds(2)) }
        #expect(selfCalls.value == 1)
        #expect(nextCalls.value == [.entry, .exit])
        #expect(loop.observerCount == 1)
    }

    @Test("an observer added from a callback takes effect from the next dispatch")
    func additionDuringDispatch() throws {
        let loop = try Looper(name: "observer-add-during")
        let added = Locked<[LooperActivity]>([])
        let adds = Counter()
        loop.addObserver(for: .entry, oneShot: true) { _, _ in
            adds.increment()
            // Registered for the activity being dispatched right now, and for the ones after it.
            loop.addObserver(for: .allActivities, order: Int.max) { activity, _ in added.append(activity) }
            loop.addObserver(for: .entry, order: Int.min) { activity, _ in added.append(activity) }
        }
        loop.stop()
        runBounded(loop) { $0.run() }
        #expect(adds.value == 1)
        #expect(added.value == [.exit])
        #expect(loop.observerCount == 2)

        loop.stop()
        runBounded(loop) { $0.run() }
        // Second run: both added observers see entry (Int.min first), then exit.
        #expect(added.value == [.exit, .entry, .entry, .exit])
    }

    // MARK: - Owner lifetime

    @Test("an owner-bound observer gets its owner, and dies with it without the loop retaining it")
    func ownerLifetime() throws {
        let loop = try Looper(name: "observer-owner")
        let calls = Counter()  // counted outside the owner, so it survives the owner
        let receivedOwner = Locked<[ObjectIdentifier]>([])
        weak var weakOwner: Owner?
        var owner: Owner? = Owner()
        weakOwner = owner
        let ownerID = ObjectIdentifier(try #require(owner))
        loop.addObserver(for: [.entry, .exit], owner: try #require(owner)) { owner, _, _ in
            owner.calls.increment()
            calls.increment()
            receivedOwner.append(ObjectIdentifier(owner))
        }
        loop.stop()
        runBounded(loop) { $0.run() }
        #expect(calls.value == 2)
        #expect(owner?.calls.value == 2)
        #expect(receivedOwner.value == [ownerID, ownerID])
        #expect(loop.observerCount == 1)

        owner = nil
        #expect(weakOwner == nil, "the loop must not retain the owner")

        loop.stop()
        runBounded(loop) { $0.run() }
        #expect(calls.value == 2, "the callback ran after its owner died")
        #expect(loop.observerCount == 0, "the dead owner's observer was not dropped at its next dispatch")
    }

    @Test("an owner released on another thread while the loop runs is never called again")
    func ownerReleasedWhileRunning() throws {
        let loop = try Looper(name: "observer-owner-running")
        let calls = Counter()
        weak var weakOwner: Owner?
        var owner: Owner? = Owner()
        weakOwner = owner
        loop.addObserver(for: .beforeTimers, owner: try #require(owner)) { _, _, _ in calls.increment() }
        let background = BackgroundLoop(loop)
        let ticker = loop.schedule(every: .milliseconds(2)) {}
        #expect(waitUntil { calls.value >= 3 })
        owner = nil
        // A call in flight holds the owner until it returns; after that it must be gone for good.
        #expect(waitUntil { weakOwner == nil }, "the loop keeps the owner alive")
        let afterRelease = calls.value
        #expect(waitUntil { loop.observerCount == 0 })
        pause(.milliseconds(30))
        #expect(calls.value == afterRelease)
        ticker.cancel()
        background.stop()
    }

    @Test("a one-shot owner-bound observer fires once and releases nothing early")
    func oneShotOwner() throws {
        let loop = try Looper(name: "observer-owner-oneshot")
        let owner = Owner()
        loop.addObserver(for: .allActivities, oneShot: true, owner: owner) { owner, _, _ in owner.calls.increment() }
        loop.stop()
        runBounded(loop) { $0.run() }
        loop.stop()
        runBounded(loop) { $0.run() }
        #expect(owner.calls.value == 1)
        #expect(loop.observerCount == 0)
    }

    // MARK: - One-shot

    @Test("a one-shot observer fires exactly once, for the first matching activity")
    func oneShot() throws {
        let loop = try Looper(name: "observer-oneshot")
        let oneShotCalls = Locked<[LooperActivity]>([])
        let regularCalls = Counter()
        loop.addObserver(for: .allActivities, oneShot: true) { activity, _ in oneShotCalls.append(activity) }
        loop.addObserver(for: [.entry, .exit]) { _, _ in regularCalls.increment() }
        #expect(loop.observerCount == 2)
        loop.schedule(after: .milliseconds(5)) { loop.stop() }
        runBounded(loop) { $0.run(for: .seconds(2)) }
        loop.stop()
        runBounded(loop) { $0.run() }
        #expect(oneShotCalls.value == [.entry])
        #expect(regularCalls.value == 4)
        #expect(loop.observerCount == 1)
    }

    @Test("a one-shot beforeWaiting observer fires once across many sleeps")
    func oneShotAcrossPasses() throws {
        let loop = try Looper(name: "observer-oneshot-waiting")
        let oneShotCalls = Counter()
        let waits = Counter()
        loop.addObserver(for: .beforeWaiting, oneShot: true) { _, _ in oneShotCalls.increment() }
        loop.addObserver(for: .beforeWaiting) { _, _ in
            if waits.increment() == 5 { loop.stop() }
        }
        let ticker = loop.schedule(every: .milliseconds(5)) {}  // makes the loop sleep and wake again and again
        runBounded(loop) { $0.run(for: .seconds(2)) }
        #expect(waits.value == 5)
        #expect(oneShotCalls.value == 1)
        ticker.cancel()
    }

    // MARK: - Observers run on the loop thread

    @Test("observers run on the loop thread")
    func observersOnLoopThread() throws {
        let loop = try Looper(name: "observer-thread")
        let offThread = Counter()
        let calls = Counter()
        loop.addObserver(for: .allActivities) { _, _ in
            calls.increment()
            if !loop.isOnLoopThread { offThread.increment() }
        }
        let background = BackgroundLoop(loop)
        background.sync()
        background.stop()
        #expect(calls.value >= 4)
        #expect(offThread.value == 0)
    }

    // MARK: - Work handed to the loop from a beforeWaiting observer

    @Test("a block posted from a beforeWaiting observer runs without another wake-up")
    func performFromBeforeWaiting() throws {
        let loop = try Looper(name: "observer-waiting-perform")
        let ran = Flag()
        loop.addObserver(for: .beforeWaiting, oneShot: true) { _, _ in
            loop.perform {
                ran.set()
                loop.stop()
            }
        }
        runBounded(loop) { $0.run(for: .seconds(1)) }
        #expect(ran.isSet, "the loop slept through a block posted by its beforeWaiting observer")
    }

    @Test("a custom source signalled from a beforeWaiting observer runs without another wake-up")
    func signalFromBeforeWaiting() throws {
        let loop = try Looper(name: "observer-waiting-signal")
        let ran = Flag()
        let source = loop.addCustomSource {
            ran.set()
            loop.stop()
        }
        // Not the first beforeWaiting: the source's registration woke the loop, and that pending wake-up would hide
        // the problem. From the second sleep on, nothing but the signal can wake the loop before the deadline.
        let waits = Counter()
        loop.addObserver(for: .beforeWaiting) { _, _ in
            if waits.increment() == 2 { source.signal() }
        }
        runBounded(loop) { $0.run(for: .seconds(1)) }
        #expect(ran.isSet, "the loop slept through a source signalled by its beforeWaiting observer")
        source.cancel()
    }

    @Test("a timer scheduled from a beforeWaiting observer fires on time, not after the sleep")
    func timerFromBeforeWaiting() throws {
        let loop = try Looper(name: "observer-waiting-timer")
        let ran = Flag()
        loop.addObserver(for: .beforeWaiting, oneShot: true) { _, _ in
            loop.schedule(after: .milliseconds(10)) {
                ran.set()
                loop.stop()
            }
        }
        runBounded(loop) { $0.run(for: .seconds(1)) }
        #expect(ran.isSet, "the loop slept past a timer scheduled by its beforeWaiting observer")
    }
}
