import ArgumentParser
#if Upload
import CompressNIO
#endif
import Foundation
#if Upload
import NIOCore
#endif
import Stallmon
import StallmonProfiles
import StallmonReport

/// `stallmon report [DIR]`: how many stalls, how long, and which code.
struct ReportCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "report",
        abstract: "Summarize the stall reports in a directory.",
        discussion: """
            Prints the number of stalls, p50/p90/p99/max duration, a histogram of durations, and stalls grouped by \
            signature (the same innermost in-app functions of the hottest stack), each with its class (cpu, \
            blocked, starved) and top in-app frame with file:line. Unreadable files are skipped with one warning \
            each on standard error. With --format json, prints one object of schema stallmon.summary/1 (see \
            README). --folded writes all samples as folded stacks (flamegraph.pl, speedscope); --html writes a \
            self-contained page with the histogram, the groups and an interactive flame graph. --pprof writes the \
            stall time by stack as a gzipped pprof profile (go tool pprof, Pyroscope); --timeline writes a Chrome \
            JSON trace (ui.perfetto.dev, chrome://tracing), linked from the --html page. --chains lists, \
            under each group, the await chains its async stalls were reached through (the async functions that \
            awaited the blocking code), and how many stalls each.

            --since and --until take an ISO 8601 time (2026-11-22T10:00:00Z, 2026-11-22) or an age: 90s, 30m, \
            1h, 2d, 1w (ago).

            Exit status: 0 when the directory could be read (even if it holds no stalls), 1 when it could not, or \
            when every report in it was unreadable.
            """)

    @Argument(help: "Report directory (default: report_dir of the configuration).")
    var directory: String?

    @Option(help: "Output format: text or json.")
    var format: OutputFormat = .text

    @Option(help: "Show at most this many groups.")
    var top: Int = 20

    @Option(help: "Only stalls that started at or after this time (ISO 8601 or an age like 1h).")
    var since: String?

    @Option(help: "Only stalls that started before this time (ISO 8601 or an age like 10m).")
    var until: String?

    @Option(help: "Only stalls of this loop.")
    var loop: String?

    @Option(help: "Also write the samples as folded stacks to this file.")
    var folded: String?

    @Option(help: "Also write a self-contained HTML report (histogram, groups, flame graph) to this file.")
    var html: String?

    @Flag(help: "Show each group's await chains: which async callers reached its blocking code, how often.")
    var chains = false

    @Option(help: "Also write the selected stalls as a gzipped pprof profile (stall time by stack) to this file.")
    var pprof: String?

    @Option(help: "Also write the selected stalls as a Chrome JSON trace (Perfetto, chrome://tracing) to this file.")
    var timeline: String?

    @OptionGroup var config: ConfigOptions

    func validate() throws {
        guard top > 0 else { throw ValidationError("--top must be at least 1") }
        if let since { _ = try TimeBound.parse(since, option: "--since") }
        if let until { _ = try TimeBound.parse(until, option: "--until") }
    }

    func run() throws {
        // Loaded (and so validated) even when DIR is given: a bad --config, STALLMON_CONFIG or STALLMON_* variable is
        // an error, never silently ignored.
        let configuration = try config.load()
        let directory = self.directory ?? configuration.reports.directory
        let selection = Selection(loop: loop, lower: try since.map { try TimeBound.parse($0, option: "--since") },
                                  upper: try until.map { try TimeBound.parse($0, option: "--until") })
        // Each output reads only the members it needs, in one pass over the directory: the summary a digest, the
        // timeline a little more, the pprof profile the samples and frames too, each folded as it is read, on every
        // core; whole reports only for --folded, --html and --chains.
        let read: DirectoryRead
        do {
            read = folded != nil || html != nil || chains
                ? try readWholeReports(directory: directory, selection: selection)
                : try fold(directory: directory, selection: selection)
        } catch {
            warn(error.description)
            throw ExitCode(1)
        }
        for problem in read.problems { warn("skipped \(problem.description)") }
        var summary = read.summary
        summary.groups = Array(summary.groups.prefix(top))
        if chains { summary.addAwaitChains(read.chosen) }
        switch format {
        case .json:
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            print(String(decoding: try encoder.encode(summary), as: UTF8.self))
        case .text:
            print(SummaryText.render(summary), terminator: "")
        }
        if let folded {
            try write(StallProfile.folded(read.chosen), to: folded)
        }
        if let timeline {
            try write(Array(try StallTimeline.json(read.entries.map(\.entry), paths: read.entries.map(\.path))),
                      to: timeline)
        }
        if let html {
            try write(try HTMLReport.render(summary: summary, flame: StallProfile.flameTree(read.chosen),
                                            timeline: timeline.map { ($0, html) }), to: html)
        }
        if let pprof {
            try write(try Self.gzip(StallPprof.serialized(read.stacks)), to: pprof)
        }
        if read.count == 0 && !read.problems.isEmpty { throw ExitCode(1) }
    }

    /// What `report` makes of a directory: the summary of the selected stalls, and what the other outputs need of
    /// them.
    private struct DirectoryRead {
        var summary: StallSummary
        /// The selected reports, whole: only for --folded, --html and --chains.
        var chosen: [StallReport] = []
        /// The selected stalls' timeline entries, in start order: only with --timeline.
        var entries: [(path: String, entry: StallTimeline.Entry)] = []
        /// The selected stalls' profile: only with --pprof.
        var stacks = StallStacks()
        var problems: [ReportReadError]
        /// Reports read, selected or not.
        var count: Int
    }

    private func readWholeReports(directory: String, selection: Selection) throws(ReportReadError) -> DirectoryRead {
        let scan = try ReportReader.scan(directory: directory)
        let selected = scan.reports.filter { selection.contains(StallDigest($0.report)) }
        var read = DirectoryRead(summary: StallSummary(directory: directory, reports: selected,
                                                       unreadable: scan.problems.count),
                                 problems: scan.problems, count: scan.reports.count)
        read.chosen = selected.map(\.report)
        if timeline != nil { read.entries = selected.map { ($0.path, StallTimeline.Entry($0.report)) } }
        if pprof != nil { for report in read.chosen { read.stacks.add(report) } }
        return read
    }

    /// Reads the least each output needs of every report: the profile's subset (which has the timeline's entry) with
    /// --pprof, the timeline's with --timeline, else a digest.
    private func fold(directory: String, selection: Selection) throws(ReportReadError) -> DirectoryRead {
        if pprof != nil {
            return try fold(StallStacks.Stall.self, directory: directory, selection: selection,
                            digest: \.entry.digest, entry: \.entry)
        }
        if timeline != nil {
            return try fold(StallTimeline.Entry.self, directory: directory, selection: selection,
                            digest: \.digest, entry: { $0 })
        }
        return try fold(StallDigest.self, directory: directory, selection: selection, digest: { $0 }, entry: nil)
    }

    /// What one worker folds of a run of reports (`ReportReader.fold`).
    private struct Folded: @unchecked Sendable {
        var summary = StallSummary.Builder()
        var stacks = StallStacks()
        var entries: [(order: StallSummary.Builder.Order, path: String, entry: StallTimeline.Entry)] = []
        var count = 0
        /// Its own: the date formatters it holds are used only by the worker folding into it. The calling thread
        /// reads the rest once that worker is done. That hand-over is why this is `@unchecked Sendable`.
        let selection: Selection
    }

    /// Reads `Subset` of every report in `directory` on all cores and folds the selected ones into the summary, the
    /// profile when `Subset` is a profile's, and the timeline's entries when --timeline asks for them.
    private func fold<Subset: ReportSubset>(
        _ type: Subset.Type, directory: String, selection: Selection,
        digest: @escaping @Sendable (Subset) -> StallDigest, entry: (@Sendable (Subset) -> StallTimeline.Entry)?
    ) throws(ReportReadError) -> DirectoryRead {
        let bounds = (loop: selection.loop, lower: selection.lower, upper: selection.upper)
        let entry = timeline != nil ? entry : nil
        var all = Folded(selection: selection)
        let problems = try ReportReader.fold(in: directory, partial: {
            Folded(selection: Selection(loop: bounds.loop, lower: bounds.lower, upper: bounds.upper))
        }, add: { (folded: inout Folded, index: Int, path: String, subset: Subset) in
            folded.count += 1
            let digest = digest(subset)
            guard folded.selection.contains(digest) else { return }
            // Start time, then file name: the order a scan sorts reports in.
            let order = StallSummary.Builder.Order(start: digest.start.wall, index: index)
            folded.summary.add(digest, path: path, order: order)
            if let stall = subset as? StallStacks.Stall { folded.stacks.add(stall) }
            if let entry { folded.entries.append((order, path, entry(subset))) }
        }, merge: { folded in
            all.count += folded.count
            all.summary.merge(folded.summary)
            all.stacks.merge(folded.stacks)
            all.entries += folded.entries
        })
        return DirectoryRead(summary: all.summary.summary(directory: directory, unreadable: problems.count),
                             entries: all.entries.sorted { $0.order < $1.order }.map { ($0.path, $0.entry) },
                             stacks: all.stacks, problems: problems, count: all.count)
    }

    /// pprof files are gzipped; a build without the Upload trait (no compress-nio) writes the profile plain, which
    /// pprof readers take as well.
    private static func gzip(_ bytes: [UInt8]) throws -> [UInt8] {
        #if Upload
        var buffer = ByteBuffer(bytes: bytes)
        var compressed = try buffer.compress(with: .gzip())
        return compressed.readBytes(length: compressed.readableBytes) ?? []
        #else
        return bytes
        #endif
    }

    private func write(_ bytes: [UInt8], to path: String) throws {
        do {
            try Data(bytes).write(to: URL(fileURLWithPath: path), options: .atomic)
        } catch {
            warn("cannot write \(path): \(error.localizedDescription)")
            throw ExitCode(1)
        }
    }

    private func write(_ text: String, to path: String) throws {
        try write(Array(text.utf8), to: path)
    }
}

/// The stalls `report` selects: `--loop`, `--since`, `--until`.
struct Selection {
    var loop: String?
    var lower: Date?
    var upper: Date?
    /// Made once: a formatter costs microseconds, and a selection is asked of every report.
    private let dates = TimeBound.Parser()

    init(loop: String?, lower: Date?, upper: Date?) {
        self.loop = loop
        self.lower = lower
        self.upper = upper
    }

    func contains(_ digest: StallDigest) -> Bool {
        if let loop, digest.loop != loop { return false }
        guard lower != nil || upper != nil else { return true }
        guard let start = dates.date(digest.start.wall) else { return false }
        if let lower, start < lower { return false }
        if let upper, start >= upper { return false }
        return true
    }
}

/// `--since` / `--until` values.
enum TimeBound {
    static func parse(_ text: String, option: String, now: Date = Date()) throws -> Date {
        let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800]
        if let unit = text.last, let seconds = units[unit], let amount = Double(text.dropLast()), amount >= 0 {
            return now.addingTimeInterval(-amount * seconds)
        }
        if let date = date(text) { return date }
        throw ValidationError("\(option) \(text): expected an ISO 8601 time (2026-11-22T10:00:00Z, 2026-11-22) "
            + "or an age (90s, 30m, 1h, 2d, 1w)")
    }

    static func date(_ text: String) -> Date? {
        Parser().date(text)
    }

    /// An ISO 8601 time with or without fractional seconds, or a day.
    struct Parser {
        private let precise = ISO8601DateFormatter()
        private let plain = ISO8601DateFormatter()
        private let day = ISO8601DateFormatter()

        init() {
            precise.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
            day.formatOptions = [.withFullDate]
        }

        func date(_ text: String) -> Date? {
            precise.date(from: text) ?? plain.date(from: text) ?? day.date(from: text)
        }
    }
}

/// The human form of a `StallSummary`.
enum SummaryText {
    static func render(_ summary: StallSummary) -> String {
        var out = "Stalls in \(summary.directory): \(summary.stalls)"
        if summary.ongoing > 0 { out += " (\(summary.ongoing) still ongoing when last written)" }
        if summary.suppressed > 0 { out += ", \(summary.suppressed) more without a report (rate limit)" }
        if summary.unreadable > 0 { out += ", \(summary.unreadable) unreadable file(s) skipped" }
        out += "\n"
        guard let durations = summary.durationMs else { return out + "No stalls recorded.\n" }
        if let first = summary.firstStart, let last = summary.lastStart { out += "From \(first) to \(last)\n" }
        out += "Loops: \(summary.loops.joined(separator: ", "))\n"
        out += "Duration: p50 \(ms(durations.p50))  p90 \(ms(durations.p90))  p99 \(ms(durations.p99))  "
            + "max \(ms(durations.max))  total \(ms(durations.total))\n"
        let classes = summary.classes.sorted { $0.value > $1.value }.map { "\($0.key) \($0.value)" }
        if !classes.isEmpty { out += "Classes: \(classes.joined(separator: ", "))\n" }
        out += "\n" + histogram(summary.histogram) + "\n"
        let rows = summary.groups.map { group -> [String] in
            var location = group.topFrame
            if let place = StallReport.location(file: group.file, line: group.line) { location += "  (\(place))" }
            let count = group.suppressed > 0 ? "\(group.count)+\(group.suppressed)" : String(group.count)
            return [count, ms(group.totalMs), ms(group.p50Ms), ms(group.maxMs),
                    group.kind == "starvation" ? "starved:\(group.stallClass?.rawValue ?? "-")" : group.stallClass?.rawValue ?? "-",
                    group.signature.map { String($0.prefix(8)) } ?? "-", location]
        }
        out += Table.render(header: ["COUNT", "TOTAL", "P50", "MAX", "CLASS", "SIG", "TOP IN-APP FRAME"], rows: rows,
                            rightAligned: [0, 1, 2, 3])
        out += awaitChains(summary.groups)
        let waits = summary.groups.filter { $0.waitingOn != nil }
        if !waits.isEmpty {
            out += "\nWhat blocked groups waited on most:\n"
            for group in waits {
                let signature = group.signature.map { String($0.prefix(8)) } ?? group.topFrame
                out += "  \(signature): \(group.waitingOn!) (\(group.waitingOnCount ?? 0) of \(group.count))\n"
            }
        }
        return out
    }

    /// With --chains: under each group with async stalls, the chains that reached it, innermost caller first.
    static func awaitChains(_ groups: [StallSummary.Group]) -> String {
        let withChains = groups.filter { $0.chains?.isEmpty == false }
        guard !withChains.isEmpty else { return "" }
        var out = "\nAwait chains (who awaited the blocking code, innermost first):\n"
        for group in withChains {
            out += "  \(group.signature.map { String($0.prefix(8)) } ?? "-")  \(group.topFrame)\n"
            for chain in group.chains ?? [] {
                let stalls = "\(chain.stalls) of \(group.count)"
                // A deep recursion would fill the screen: its first callers, and how many more.
                var shown = chain.functions.prefix(8).joined(separator: "\n             ← ")
                if chain.functions.count > 8 { shown += "\n             ← … \(chain.functions.count - 8) more" }
                out += "    \(stalls.padding(toLength: 8, withPad: " ", startingAt: 0)) \(shown)\n"
            }
        }
        return out
    }

    static func histogram(_ buckets: [StallSummary.Bucket]) -> String {
        let widest = max(1, buckets.map(\.count).max() ?? 1)
        let used = buckets.enumerated().filter { $0.element.count > 0 }.map(\.offset)
        guard let first = used.first, let last = used.last else { return "" }
        return buckets[first...last].map { bucket in
            let label = bucket.upperMs.map { "\(short(bucket.lowerMs))–\(short($0))" } ?? "≥ \(short(bucket.lowerMs))"
            let bar = String(repeating: "█", count: bucket.count == 0 ? 0 : max(1, bucket.count * 40 / widest))
            return label.padding(toLength: 14, withPad: " ", startingAt: 0) + " " + bar + " \(bucket.count)"
        }.joined(separator: "\n") + "\n"
    }

    private static func short(_ value: Double) -> String {
        value >= 1000 ? "\(Int(value / 1000)) s" : "\(Int(value)) ms"
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
