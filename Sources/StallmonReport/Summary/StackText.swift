/// Plain-text stacks for places that take text (OTLP attributes).
public enum StackText {
    /// The stack most samples share, one frame per line: `symbol (file:line)` or `module+offset`.
    public static func mostCommonStack(_ report: StallReport) -> String {
        guard let best = report.mostCommonStack()?.frames else { return "" }
        return text(best, in: report)
    }

    /// The report's hottest stack (the path most samples share, as `stallmon show` prints it), one frame per line;
    /// the most common exact stack for reports without one.
    public static func hottestStack(_ report: StallReport) -> String {
        guard let frames = report.hottestStack?.frames, !frames.isEmpty else { return mostCommonStack(report) }
        return text(frames, in: report)
    }

    /// The hottest stack of the thread holding the lock the loop waited on most (`waitingOn`), one frame per
    /// line; empty when the holder's stack was not sampled.
    public static func holderStack(_ report: StallReport) -> String {
        guard let frames = report.waitingOn?.first?.holderStack?.frames else { return "" }
        return text(frames, in: report)
    }

    static func text(_ indices: [Int], in report: StallReport) -> String {
        indices.compactMap { index -> String? in
            guard report.frames.indices.contains(index) else { return nil }
            let frame = report.frames[index]
            var line = frame.symbol ?? "\(frame.module ?? "?")+\(frame.offset ?? "?")"
            if let location = StallReport.location(file: frame.file, line: frame.line) { line += " (\(location))" }
            return line
        }.joined(separator: "\n")
    }
}
