import ArgumentParser
import Foundation
import Stallmon
import StallmonReport

/// `stallmon symbolicate REPORT`: names again, offline.
struct SymbolicateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "symbolicate",
        abstract: "Re-symbolicate a report from its image list, e.g. with debug files of a stripped binary.",
        discussion: """
            Each image recorded in the report is looked up by its GNU build id under every --debug-dir \\
            (DIR/.build-id/xx/yyyy.debug), then at its recorded path when the build id matches, then in \\
            /usr/lib/debug. Names (demangled), file:line, the hottest stack, the top frame and the signature are \\
            recomputed; frames of images not found keep what they had. Writes the report as JSON to standard \\
            output, or to --output; prints which file served each image on standard error.

            Exit status: 0, or 1 when the report cannot be read or written.
            """)

    @Argument(help: "The report file.")
    var report: String

    @Option(name: .customLong("debug-dir"), help: "A directory with a .build-id tree of debug files (repeatable).")
    var debugDirectories: [String] = []

    @Option(name: [.short, .long], help: "Write the result here instead of standard output (may be the report).")
    var output: String?

    func run() throws {
        let original: StallReport
        do {
            original = try ReportReader.read(report)
        } catch {
            warn(error.description)
            throw ExitCode(1)
        }
        let outcome = OfflineSymbolicator(debugDirectories: debugDirectories).symbolicate(original)
        for (image, source) in outcome.sources.sorted(by: { $0.key < $1.key }) {
            warn("\(image): \(source.map { "symbols from \($0)" } ?? "no file with its build id found")")
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .withoutEscapingSlashes]
        let bytes = try encoder.encode(outcome.report)
        if let output {
            do {
                try bytes.write(to: URL(fileURLWithPath: output), options: .atomic)
            } catch {
                warn("cannot write \(output): \(error.localizedDescription)")
                throw ExitCode(1)
            }
        } else {
            print(String(decoding: bytes, as: UTF8.self))
        }
    }
}
