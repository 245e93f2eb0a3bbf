// The documentation's StallmonNIO snippets (README and articles), compiled here as written (never run):
// `ReadmeSnippetTests` checks that each snippet that imports StallmonNIO appears below verbatim, in the order of
// `DocumentedSnippets`, so the documentation cannot drift. Regenerate by copying a changed snippet's body into its
// function.
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import Stallmon
import StallmonNIO

func readmeNIOSnippet0() throws {

// Plain NIO, a group of your own.
let group = MultiThreadedEventLoopGroup(numberOfThreads: System.coreCount)
let monitor = try NIOStallMonitor(group: group, configuration: .init(detection: .init(threshold: .milliseconds(100))))
monitor.start()
// ... ServerBootstrap(group: group) ...
monitor.stop()  // joins threads: from async code, call it off the cooperative pool (StallMonitorService does)
try group.syncShutdownGracefully()
}

func readmeNIOSnippet1() throws {

// Hummingbird 2 and Vapor 4 run on MultiThreadedEventLoopGroup.singleton unless you give them a group of your own;
// monitor the group your server runs on.
let configuration = try StallMonitorConfiguration.load(file: "/etc/myservice/stallmon.conf")
let monitor = try NIOStallMonitor(group: MultiThreadedEventLoopGroup.singleton, configuration: configuration,
                                  logger: Logger(label: "myservice.stallmon"))
// In a ServiceGroup: the application's services run inside StallMonitorService, which stops the monitor only after
// they all returned, so a stall while they drain is watched to its end. SIGTERM and SIGINT shut the group down
// gracefully (without gracefulShutdownSignals, SIGTERM kills the process: no drain, no report). Or call
// monitor.start() and monitor.stop() yourself.
let application: [any Service] = [/* app */]
let services = ServiceGroup(services: [StallMonitorService(monitor, watching: application)],
                            gracefulShutdownSignals: [.sigterm, .sigint], logger: Logger(label: "myservice"))
_ = services
}
