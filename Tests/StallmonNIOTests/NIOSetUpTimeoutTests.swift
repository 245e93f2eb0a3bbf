import CStallmonNIOHook
import Foundation
import NIOCore
import NIOPosix
import Stallmon
@testable import StallmonNIO
import Testing

/// Issue 26 (1): when a loop missed `setUpTimeout` between the set-up's two phases, the monitor closed its hooks
/// (freeing them) while the loop's install task was still queued; that task later installed freed memory as the
/// thread's hook, read by every later `epoll_wait` on that thread.
@Suite(.serialized)
struct NIOSetUpTimeoutTests {
    @Test func aLoopThatMissesTheTimeoutBeforeInstallingNeverInstallsAClosedHook() throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        defer { try? group.syncShutdownGracefully() }
        let loops = Array(group.makeIterator())
        // Between the two phases, the second loop gets busy for longer than the set-up timeout.
        let key = ObjectIdentifier(loops[0])
        NIOStallMonitor.willInstallHooks.withLock { $0[key] = { loops in loops[1].execute { usleep(1_000_000) } } }
        defer { _ = NIOStallMonitor.willInstallHooks.withLock { $0.removeValue(forKey: key) } }
        #expect(throws: StallMonitorError.self) {
            _ = try NIOStallMonitor(group: group, configuration: .init(detection: .init(threshold: .milliseconds(100))),
                                    setUpTimeout: .milliseconds(300))
        }
        // Once the loop is free again its set-up task has run: it must have installed nothing.
        let installed = try loops[1].submit { cstallmon_wait_hook_current() != nil }.wait()
        #expect(installed == false, "the late set-up task installed the closed (freed) hook")
        // And the loop still works.
        #expect(try loops[1].submit { 42 }.wait() == 42)
    }

    /// Issue 26 (6): created on one of the group's loops, the set-up always failed after up to 3 × `setUpTimeout`
    /// with a misleading "NIOPosix linked as a shared library?".
    @Test func createdOnOneOfTheGroupsLoopsItRefusesAtOnceSayingWhy() throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        defer { try? group.syncShutdownGracefully() }
        let outcome = try group.next().submit { () -> (String?, Duration) in
            let started = ContinuousClock.now
            do {
                _ = try NIOStallMonitor(group: group, configuration: .init(detection: .init(threshold: .milliseconds(100))))
                return (nil, ContinuousClock.now - started)
            } catch {
                return ("\(error)", ContinuousClock.now - started)
            }
        }.wait()
        #expect(outcome.0?.contains("cannot be created on one of the group's own event loops") == true,
                "\(outcome.0 ?? "no error")")
        #expect(outcome.1 < .seconds(1), "at once, not after the set-up timeout: \(outcome.1)")
    }

    /// Issue 26 (6): each phase of the set-up had a timeout of its own, so two slow phases took twice as long.
    @Test func theWholeSetUpIsBoundedByOneTimeout() throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        defer { try? group.syncShutdownGracefully() }
        let loops = Array(group.makeIterator())
        // Slow in each phase, each time under the timeout, together over it.
        loops[1].execute { usleep(400_000) }
        let key = ObjectIdentifier(loops[0])
        NIOStallMonitor.willInstallHooks.withLock { $0[key] = { loops in loops[1].execute { usleep(400_000) } } }
        defer { _ = NIOStallMonitor.willInstallHooks.withLock { $0.removeValue(forKey: key) } }
        let started = ContinuousClock.now
        #expect(throws: StallMonitorError.self) {
            _ = try NIOStallMonitor(group: group, configuration: .init(detection: .init(threshold: .milliseconds(100))),
                                    setUpTimeout: .milliseconds(600))
        }
        let took = ContinuousClock.now - started
        #expect(took < .milliseconds(1000), "the set-up took \(took) for a 600 ms timeout")
    }
}
