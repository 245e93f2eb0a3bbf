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
        NIOStallMonitor.willInstallHooks = { loops in
            loops[1].execute { usleep(1_000_000) }
        }
        defer { NIOStallMonitor.willInstallHooks = nil }
        #expect(throws: StallMonitorError.self) {
            _ = try NIOStallMonitor(group: group, configuration: .init(threshold: .milliseconds(100)),
                                    setUpTimeout: .milliseconds(300))
        }
        // Once the loop is free again its set-up task has run: it must have installed nothing.
        let installed = try loops[1].submit { cstallmon_wait_hook_current() != nil }.wait()
        #expect(installed == false, "the late set-up task installed the closed (freed) hook")
        // And the loop still works.
        #expect(try loops[1].submit { 42 }.wait() == 42)
    }
}
