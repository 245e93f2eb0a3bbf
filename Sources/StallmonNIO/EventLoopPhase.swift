#if NIO
import Stallmon
import StallmonReport

/// Which phase of a SwiftNIO event loop's tick a stall's hottest stack ran in, read from the stack itself, so no
/// per-tick marker is needed. NIO runs channel-handler callbacks (the I/O phase) inside
/// `SelectableEventLoop._blockingWaitForWork`, a function NIO keeps by that name and never inlines so profilers can
/// recognise it; everything else the loop runs in `SelectableEventLoop.run()` is the task phase (`execute`,
/// scheduled tasks, future callbacks, the final drain at shutdown).
enum EventLoopPhase {
    static let io = "io"
    static let tasks = "tasks"

    /// An event loop's section of its stalls' reports: the phase.
    struct Section: StallSection {
        func write(into report: inout StallReport, builder: ReportBuilder) {
            report.phase = EventLoopPhase.of(report)
        }
    }

    static func of(_ report: StallReport) -> String? {
        let indices = report.hottestStack?.frames
            ?? report.samples.first { $0.status == .ok && $0.idle != true && !$0.frames.isEmpty }?.frames ?? []
        let symbols = indices.compactMap { $0 < report.frames.count ? report.frames[$0].symbol : nil }
        return of(symbols: symbols)
    }

    /// `symbols`: demangled function names of one stack, innermost first.
    static func of(symbols: [String]) -> String? {
        if symbols.contains(where: { $0.contains("SelectableEventLoop._blockingWaitForWork") }) { return io }
        if symbols.contains(where: { $0.contains("SelectableEventLoop") }) { return tasks }
        return nil
    }
}
#endif
