import ArgumentParser
import Stallmon

/// `stallmon`: run the demo service, read stall reports, follow the event log.
@main
struct StallmonCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stallmon",
        abstract: "Main-loop stall monitor for Linux services.",
        discussion: """
            Reports are JSON files (one per stall) in the report directory; the event log is JSON lines.
            Results go to standard output, diagnostics to standard error.

            Exit codes: 0 success; 1 nothing could be read or the command failed; 64 invalid arguments or \
            configuration.
            """,
        subcommands: [DemoCommand.self, ReportCommand.self, ShowCommand.self, TailCommand.self, UploadCommand.self, SymbolicateCommand.self])
}

/// `--config FILE`: where defaults for the report directory and the event log come from.
struct ConfigOptions: ParsableArguments {
    @Option(name: .customLong("config"),
            help: "Config file (default: $STALLMON_CONFIG if set); STALLMON_* variables override it.")
    var path: String?

    func load() throws -> StallMonitorConfiguration {
        let environment = ProcessInfo.processInfo.environment
        do {
            return try StallMonitorConfiguration.load(file: path ?? environment[StallMonitorConfiguration.configFileVariable],
                                                      environment: environment)
        } catch {
            throw ValidationError(error.description)
        }
    }
}

/// `--format text|json`.
enum OutputFormat: String, ExpressibleByArgument, CaseIterable {
    case text
    case json
}

/// Writes to standard error.
func warn(_ message: String) {
    FileHandle.standardError.write(Data(("stallmon: " + message + "\n").utf8))
}

import Foundation
