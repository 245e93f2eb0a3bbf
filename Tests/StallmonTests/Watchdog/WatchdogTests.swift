import Dispatch
import Foundation
import Logging
@testable import Stallmon
import StallmonLoop
import StallmonTestSupport
import Synchronization
import Testing

/// The process's one watchdog thread as a service's own code meets it.
struct WatchdogTests {
    /// Runs `onMessage` with every message, on the thread that logs it.
    struct CallbackLogHandler: LogHandler {
        let onMessage: @Sendable (String) -> Void
        var logLevel: Logger.Level = .trace
        var metadata: Logger.Metadata = [:]

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(level: Logger.Level, message: Logger.Message, metadata: Logger.Metadata?, source: String,
                 file: String, function: String, line: UInt) {
            onMessage(message.description)
        }
    }

    /// A log handler that stops the monitor whose warning it receives runs on the watchdog thread, inside that
    /// source's own step. Before (a review of issue 42's watchdog): the stop waited for the lock its own thread held,
    /// and every monitor of the process went blind. Now the source is finished right after its step.
    @Test func aLogHandlerThatStopsTheMonitorOnTheWatchdogThreadReturns() async throws {
        let monitorBox = Mutex<LooperStallMonitor?>(nil)
        let stopped = DispatchSemaphore(value: 0)
        let warned = Atomic<Bool>(false)
        let logger = Logger(label: "stallmon.test") { _ in
            CallbackLogHandler { message in
                guard message.contains("blocks the sampling signal") else { return }
                warned.store(true, ordering: .releasing)
                monitorBox.withLock { $0 }?.stop()
                stopped.signal()
            }
        }
        let configuration = StallMonitorConfiguration(
            detection: .init(threshold: .milliseconds(100)), reports: .init(directory: makeTemporaryDirectory("watchdog-reentrant")))
        let signal = try configuration.detection.signal.resolve()
        let loop = try Looper(name: "blocks-the-signal")
        let monitor = try LooperStallMonitor(loop: loop, configuration: configuration, logger: logger)
        monitorBox.withLock { $0 = monitor }
        Thread.detachNewThread { loop.run(for: .seconds(20)) }
        monitor.start()
        loop.perform(label: "bind") {}  // the loop binds itself to the capture at its next pass
        // Then a stall whose samples find the signal blocked: the tracker warns from inside the source's step.
        loop.perform(label: "stall with the signal blocked") {
            var blocked = sigset_t()
            sigemptyset(&blocked)
            sigaddset(&blocked, signal)
            pthread_sigmask(SIG_BLOCK, &blocked, nil)
            // 0.4 s, and on until the warning came (30 s at most), however late a loaded machine runs the watchdog.
            stallmonTestBusySpin(milliseconds: 400) { warned.load(ordering: .acquiring) }
        }
        let returned = try await offThePool { stopped.wait(timeout: .now() + 20) == .success }
        loop.stop()
        #expect(returned, "the monitor's stop, from the watchdog thread's own log handler, returned")
    }
}

/// The watchdog's own schedstat, read each pass without a string: the same figure as the string parse.
struct OwnSchedstatTests {
    @Test(arguments: [("123 456 789\n", 456), ("0 18446744073709551615 1\n", UInt64.max), ("5 7\n", 7), ("5 7", 7)])
    func theSecondFieldIsTheRunDelay(_ line: String, _ expected: UInt64) {
        #expect(OwnSchedstat.secondField(ArraySlice(Array(line.utf8))) == expected)
    }

    @Test(arguments: ["", "123", "1 x 3", "1 18446744073709551616 2", "-1 -2"])
    func oddLinesGiveNothing(_ line: String) {
        #expect(OwnSchedstat.secondField(ArraySlice(Array(line.utf8))) == nil)
    }

    @Test func theOpenFileReadsThisThreadsFigure() throws {
        let reader = OwnSchedstat()
        let first = try #require(reader.runDelay())
        let second = try #require(reader.runDelay())
        #expect(second >= first)
    }
}
