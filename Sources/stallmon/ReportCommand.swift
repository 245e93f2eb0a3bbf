import ArgumentParser
import Foundation
import Stallmon

/// `stallmon report [DIR]`: how many stalls, how long, and which code.
struct ReportCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "report",
        abstract: "Summarize the stall reports in a directory.",
        discussion: """
            Prints the number of stalls, p50/p90/p99/max duration, and stalls grouped by their top in-app frame \
            (the innermost frame of your own code). Unreadable files are skipped with one warning each on \
            standard error. With --format json, prints one object of schema stallmon.summary/1 (see README).

            Exit status: 0 when the directory could be read (even if it holds no stalls), 1 when it could not, or \
            when every report in it was unreadable.
            """)

    @Argument(help: "Report directory (default: report_dir of the configuration).")
    var directory: String?

    @Option(help: "Output format: text or json.")
    var format: OutputFormat = .text

    @Option(help: "Show at most this many groups.")
    var top: Int = 20

    @OptionGroup var config: ConfigOptions

    func validate() throws {
        guard top > 0 else { throw ValidationError("--top must be at least 1") }
    }

    func run() throws {
        let directory = try self.directory ?? config.load().reportDirectory
        let scan: ReportReader.DirectoryScan
        do {
            scan = try ReportReader.scan(directory: directory)
        } catch {
            warn(error.description)
            throw ExitCode(1)
        }
        for problem in scan.problems { warn("skipped \(problem.description)") }
        var summary = StallSummary(directory: directory, reports: scan.reports, unreadable: scan.problems.count)
        summary.groups = Array(summary.groups.prefix(top))
        switch format {
        case .json:
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            print(String(decoding: try encoder.encode(summary), as: UTF8.self))
        case .text:
            print(SummaryText.render(summary), terminator: "")
        }
        if scan.reports.isEmpty && !scan.problems.isEmpty { throw ExitCode(1) }
    }
}

/// The human form of a `StallSummary`.
enum SummaryText {
    static func render(_ summary: StallSummary) -> String {
        var out = "Stalls in \(summary.directory): \(summary.stalls)"
        if summary.ongoing > 0 { out += " (\(summary.ongoing) still ongoing when last written)" }
        if summary.unreadable > 0 { out += ", \(summary.unreadable) unreadable file(s) skipped" }
        out += "\n"
        guard let durations = summary.durationMs else { return out + "No stalls recorded.\n" }
        if let first = summary.firstStart, let last = summary.lastStart { out += "From \(first) to \(last)\n" }
        out += "Loops: \(summary.loops.joined(separator: ", "))\n"
        out += "Duration: p50 \(ms(durations.p50))  p90 \(ms(durations.p90))  p99 \(ms(durations.p99))  "
            + "max \(ms(durations.max))  total \(ms(durations.total))\n\n"
        let rows = summary.groups.map { group -> [String] in
            var location = group.topFrame
            if let file = group.file, let line = group.line {
                location += "  (\((file.split(separator: "/").last).map(String.init) ?? file):\(line))"
            }
            return [String(group.count), ms(group.totalMs), ms(group.p50Ms), ms(group.maxMs), location]
        }
        out += Table.render(header: ["COUNT", "TOTAL", "P50", "MAX", "TOP IN-APP FRAME"], rows: rows,
                            rightAligned: [0, 1, 2, 3])
        return out
    }
}

func ms(_ value: Double) -> String {
    value >= 1000 ? String(format: "%.2f s", value / 1000) : String(format: "%.1f ms", value)
}

/// A plain left/right-aligned text table.
enum Table {
    static func render(header: [String], rows: [[String]], rightAligned: Set<Int> = []) -> String {
        let all = [header] + rows
        let widths = header.indices.map { column in all.map { $0[column].count }.max() ?? 0 }
        return all.map { row in
            row.enumerated().map { column, cell in
                let padding = String(repeating: " ", count: widths[column] - cell.count)
                if column == row.count - 1 && !rightAligned.contains(column) { return cell }
                return rightAligned.contains(column) ? padding + cell : cell + padding
            }.joined(separator: "  ")
        }.joined(separator: "\n") + "\n"
    }
}
