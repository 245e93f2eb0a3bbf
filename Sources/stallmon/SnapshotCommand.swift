import ArgumentParser
import Foundation
import Stallmon

#if canImport(Glibc)
import Glibc
#endif

/// `stallmon snapshot PID`: asks a running service, through its control socket, for the state of every monitored
/// loop and pool with a stack sample of each, written by the service as a report (`kind: snapshot`).
struct SnapshotCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "snapshot",
        abstract: "Ask a running service for a snapshot of its loops and pools, written as a report.",
        discussion: """
            Connects to <report-dir>/control-PID.sock (the service's control_socket, on by default), which only the \
            service's own user may use. Prints the snapshot report's path; read it with `stallmon show PATH`. \
            Exit 1 when there is no such socket, the request was refused, or no snapshot was written.
            """)

    @Argument(help: "The service's process id.")
    var pid: Int32

    @Option(help: "The service's report directory (default: report_dir of the configuration).")
    var reportDir: String?

    @OptionGroup var config: ConfigOptions

    func run() throws {
        let directory = try reportDir ?? config.load().reports.directory
        let path = ControlSocketClient.path(directory: directory, pid: pid)
        switch ControlSocketClient.requestSnapshot(at: path) {
        case .success(let reportPath):
            print(reportPath)
        case .failure(let message):
            warn(message)
            throw ExitCode(1)
        }
    }
}
