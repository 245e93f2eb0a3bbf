import StallmonLoop
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("Looper run-loop modes")
struct LooperModeTests {
    static let tracking: LooperMode = "tests.tracking"
    static let modal: LooperMode = "tests.modal"
    static let later: LooperMode = "tests.later-common"

    @Test("modes intern by name; default and common are built in")
    func modeNames() {
        #expect(LooperMode("default") == .default)
        #expect(LooperMode("common") == .common)
        #expect(LooperMode("tests.tracking") == Self.tracking)
        #expect(Self.tracking.name == "tests.tracking")
        #expect(Self.tracking != Self.modal)
        #expect(LooperMode.default.name == "default")
    }

    @Test("a default-mode timer waits while a nested run is in another mode; a common-mode timer fires in both")
    func timersPerMode() throws {
        let loop = try Looper(name: "modes-timers")
        loop.addCommonMode(Self.tracking)
        let log = Locked<[String]>([])
        loop.schedule(after: .milliseconds(5)) { log.append("default") }
        loop.schedule(every: .milliseconds(10), label: "common", mode: .common) {
            if loop.currentMode == Self.tracking { log.append("common-in-tracking") }
        }
        loop.schedule(after: .milliseconds(5), mode: Self.tracking) { log.append("tracking") }
        let nested = Locked<LooperRunResult?>(nil)
        loop.perform {
            log.append("nested-begin")
            let result = loop.run(in: Self.tracking, for: .milliseconds(60))
            nested.withLock { $0 = result }
            log.append("nested-end")
        }
        loop.schedule(after: .milliseconds(120)) { loop.stop() }
        runBounded(loop) { $0.run() }
        let events = log.value
        #expect(nested.value == .timedOut)
        // The tracking timer fired inside the nested run, the default one only after it.
        let begin = try #require(events.firstIndex(of: "nested-begin"))
        let end = try #require(events.firstIndex(of: "nested-end"))
        let tracking = try #require(events.firstIndex(of: "tracking"))
        let defaultTimer = try #require(events.firstIndex(of: "default"))
        #expect(begin < tracking && tracking < end)
        #expect(defaultTimer > end, "the default timer fired during the nested run: \(events)")
        #expect(events.contains("common-in-tracking"))
    }

    @Test("adding a mode to the common set later carries the common items into it")
    func commonModesGrow() throws {
        let loop = try Looper(name: "modes-common-later")
        let fired = Counter()
        loop.schedule(every: .milliseconds(2), mode: .common) { fired.increment() }
        let before = Locked(-1)
        let after = Locked(-1)
        loop.perform {
            let start = fired.value
            // Not in the common set: the common timer does not belong to it, so the mode is empty.
            #expect(loop.run(in: Self.later, for: .milliseconds(30)) == .finished)
            before.withLock { $0 = fired.value - start }
            loop.addCommonMode(Self.later)
            let second = fired.value
            #expect(loop.run(in: Self.later, for: .milliseconds(30)) == .timedOut)
            after.withLock { $0 = fired.value - second }
            loop.stop()
        }
        runBounded(loop) { $0.run() }
        #expect(before.value == 0)
        #expect(after.value > 0)
        #expect(loop.commonModes.contains(Self.later))
        #expect(loop.commonModes.first == .default)
    }

    @Test("run(in:) says why it returned: finished, timed out, handled a source, stopped")
    func stopReasons() throws {
        let loop = try Looper(name: "modes-reasons")
        let results = Locked<[LooperRunResult]>([])
        let source = loop.addCustomSource(label: "modal-source", mode: Self.modal) {}
        loop.schedule(every: .seconds(10), mode: Self.tracking) {}  // keeps tracking non-empty
        loop.perform {
            results.append(loop.run(in: "tests.nothing-here"))  // an unknown mode has nothing in it
            results.append(loop.run(in: Self.tracking, for: .milliseconds(20)))
            source.signal()
            results.append(loop.run(in: Self.modal, for: .seconds(2), returnAfterSourceHandled: true))
            loop.perform(mode: Self.tracking) { loop.stop() }
            results.append(loop.run(in: Self.tracking, for: .seconds(2)))
            results.append(loop.run(in: Self.tracking, for: .zero))  // polls once, then times out
            loop.stop()
        }
        #expect(runBounded(loop) { $0.run() })
        #expect(results.value == [.finished, .timedOut, .handledSource, .stopped, .timedOut])
    }

    @Test("a stop inside a nested run ends the nested run only")
    func stopEndsInnermost() throws {
        let loop = try Looper(name: "modes-stop-inner")
        let outerPasses = Counter()
        let nestedResult = Locked<LooperRunResult?>(nil)
        loop.addObserver(for: .beforeTimers) { _, _ in outerPasses.increment() }
        loop.schedule(every: .seconds(10), mode: Self.modal) {}
        loop.perform {
            loop.perform(mode: Self.modal) { loop.stop() }
            nestedResult.withLock { $0 = loop.run(in: Self.modal) }
            loop.perform { loop.stop() }
        }
        #expect(runBounded(loop) { $0.run() })
        #expect(nestedResult.value == .stopped)
        #expect(outerPasses.value >= 2, "the outer run went on after the nested one stopped")
    }

    @Test("observers see entry and exit of a nested run in their mode, and only their mode's passes")
    func observersPerMode() throws {
        let loop = try Looper(name: "modes-observers")
        let tracking = Locked<[LooperActivity]>([])
        let defaults = Locked<[LooperActivity]>([])
        loop.addObserver(for: [.entry, .exit, .beforeSources], mode: Self.tracking) { activity, _ in
            tracking.append(activity)
        }
        loop.addObserver(for: [.entry, .exit]) { activity, _ in defaults.append(activity) }
        loop.schedule(every: .seconds(10), mode: Self.tracking) {}
        loop.perform {
            loop.run(in: Self.tracking, for: .milliseconds(5))
            loop.stop()
        }
        #expect(runBounded(loop) { $0.run() })
        #expect(tracking.value.first == .entry)
        #expect(tracking.value.last == .exit)
        #expect(tracking.value.filter { $0 == .entry }.count == 1)
        #expect(tracking.value.contains(.beforeSources))
        #expect(defaults.value == [.entry, .exit], "default observers must not see the nested run")
    }

    @Test("posted blocks run only in their modes; perform(modes:) targets several")
    func performPerMode() throws {
        let loop = try Looper(name: "modes-perform")
        let log = Locked<[String]>([])
        loop.perform {
            loop.perform { log.append("default") }
            loop.perform(mode: Self.modal) { log.append("modal") }
            loop.perform(modes: [Self.modal, .default]) { log.append("both") }
            loop.run(in: Self.modal, for: .milliseconds(20))
            log.append("back")
            loop.perform { loop.stop() }
        }
        #expect(runBounded(loop) { $0.run() })
        #expect(log.value == ["modal", "both", "back", "default"])
    }

    @Test("a readable descriptor of the default mode neither runs nor spins the loop during a nested run")
    func descriptorsPerMode() throws {
        let loop = try Looper(name: "modes-descriptors")
        let pipe = try Pipe()
        let reads = Counter()
        let reader = loop.addReader(pipe.readEnd) {
            _ = readAvailable(pipe.readEnd)
            reads.increment()
        }
        let nestedPasses = Counter()
        loop.addObserver(for: .beforeTimers, mode: Self.modal) { _, _ in nestedPasses.increment() }
        loop.schedule(every: .seconds(10), mode: Self.modal) {}
        let readsDuringNested = Locked(-1)
        loop.perform {
            _ = writeAll(pipe.writeEnd, [1])
            loop.run(in: Self.modal, for: .milliseconds(50))
            readsDuringNested.withLock { $0 = reads.value }
            loop.schedule(after: .milliseconds(20)) { loop.stop() }
        }
        #expect(runBounded(loop) { $0.run() })
        reader.cancel()
        #expect(readsDuringNested.value == 0)
        #expect(nestedPasses.value < 10, "the nested run spun on a descriptor not in its mode")
        #expect(reads.value > 0, "the reader runs once the loop is back in its mode")
    }

    @Test("run(in:) from another thread while the loop runs is refused at once")
    func runFromAnotherThread() throws {
        let background = try BackgroundLoop(name: "modes-other-thread")
        let start = MonotonicInstant.now()
        #expect(background.loop.run(in: .default, for: .seconds(5)) == .runningOnAnotherThread)
        #expect(millisecondsBetween(start, .now()) < 1000)
        background.stop()
    }

    @Test("currentMode and Looper.current follow the innermost run")
    func currentModeAndLoop() throws {
        let loop = try Looper(name: "modes-current")
        let seen = Locked<[String]>([])
        #expect(loop.currentMode == nil)
        #expect(Looper.current == nil)
        loop.schedule(every: .seconds(10), mode: Self.tracking) {}
        loop.perform {
            seen.append(loop.currentMode?.name ?? "nil")
            seen.append(Looper.current === loop ? "current" : "not current")
            loop.perform(mode: Self.tracking) { seen.append(loop.currentMode?.name ?? "nil") }
            loop.run(in: Self.tracking, for: .milliseconds(10))
            seen.append(loop.currentMode?.name ?? "nil")
            loop.stop()
        }
        #expect(runBounded(loop) { $0.run() })
        #expect(seen.value == ["default", "current", "tests.tracking", "default"])
        #expect(Looper.current == nil)
    }

    @Test("a loop run inside another loop's callback is current while it runs, then the outer one again")
    func currentAcrossTwoLoops() throws {
        let outer = try Looper(name: "modes-outer")
        let inner = try Looper(name: "modes-inner")
        let seen = Locked<[String]>([])
        inner.perform { seen.append(Looper.current?.name ?? "nil"); inner.stop() }
        outer.perform {
            inner.run(for: .seconds(1))
            seen.append(Looper.current?.name ?? "nil")
            outer.stop()
        }
        #expect(runBounded(outer) { $0.run() })
        #expect(seen.value == ["modes-inner", "modes-outer"])
    }
}
