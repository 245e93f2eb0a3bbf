import ArgumentParser
import Stallmon
import StallmonReport

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
        subcommands: subcommands)

    /// `upload` needs the package's `Upload` trait (on by default).
    private static var subcommands: [any ParsableCommand.Type] {
        var commands: [any ParsableCommand.Type] = [DemoCommand.self, ReportCommand.self, ShowCommand.self,
                                                    TailCommand.self, SnapshotCommand.self]
        #if Upload
        commands.append(UploadCommand.self)
        #endif
        commands.append(SymbolicateCommand.self)
        return commands
    }
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
