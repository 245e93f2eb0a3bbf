import Foundation
import StallmonReport

/// The report directory as the writer uses it: each report written atomically and durably (handed to the sinks
/// before it is published), its path kept for the stall's later reports, a failure logged once per change of state
/// with the reports dropped meanwhile counted, and the retention limits applied. Writer-thread-only.
struct ReportFiles {
    let directory: String
    /// Where each stall's report went, so its interim and final reports replace one another.
    var paths: [String: String] = [:]
    private var failing: String?
    private var failingDescription = ""
    private var droppedSinceFailure = 0

    init(directory: String) {
        self.directory = directory
    }

    /// Writes the report (an interim one and its final replacement share a path). Returns the path, or nil after
    /// logging the failure once per change of state.
    mutating func write(_ report: StallReport, client: PipelineMember, delivery: inout SinkDelivery,
                        toSinks: Bool = true, log: (StallEvent) -> Void) -> String? {
        let path = paths[report.id] ?? path(for: report)
        do {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .withoutEscapingSlashes]
            let bytes = Array(try encoder.encode(report))
            try AtomicFile.createDirectory(directory)
            // Sinks get the durable file before it is published: a report visible in the directory has always
            // reached every sink (e.g. the spool), even if the process dies between the two steps.
            try AtomicFile.write(bytes, to: path) { durable in
                guard toSinks else { return }
                delivery.handOver(WrittenStallReport(report: report, path: path, contentsPath: durable), from: client)
            }
            paths[report.id] = path
            if failing != nil {
                client.logger.notice("stallmon: reports are being written again", metadata: [
                    "directory": "\(directory)", "dropped": "\(droppedSinceFailure)",
                    "previousError": "\(failingDescription)",
                ])
                failing = nil
                droppedSinceFailure = 0
            }
            return path
        } catch {
            let reason = "\(error)"
            // The state is what failed and why, not which (randomly named) temporary file.
            let key = (error as? FileError).map { "\($0.operation) \($0.errorNumber)" } ?? reason
            droppedSinceFailure += 1
            if failing != key {
                client.logger.error("stallmon: cannot write stall reports; dropping them until this is fixed",
                                    metadata: ["directory": "\(directory)", "error": "\(reason)"])
                failing = key
                failingDescription = reason
                var event = StallEvent(time: WallClock.iso8601(nanoseconds: WallClock.nowNanoseconds()),
                                       event: "monitor.error")
                event.message = "cannot write stall reports: \(reason)"
                log(event)
            }
            return nil
        }
    }

    /// Removes the oldest reports beyond `client`'s retention limits (never one still queued for upload); counts
    /// them and logs once per pass that removed any.
    func applyRetention(for client: PipelineMember) {
        let limits = client.retentionLimits
        let remove = ReportRetention.entriesToRemove(ReportRetention.list(directory), limits: limits,
                                                     now: WallClock.nowNanoseconds())
        guard !remove.isEmpty else { return }
        var removed = 0
        for entry in remove where unlink(directory + "/" + entry.name) == 0 { removed += 1 }
        try? AtomicFile.syncDirectory(directory)
        client.counters.reportsRemovedByRetention.wrappingAdd(removed, ordering: .relaxed)
        client.logger.notice("stallmon: removed old reports beyond the retention limits", metadata: [
            "directory": "\(directory)", "removed": "\(removed)", "oldest": "\(remove[0].name)",
            "limits": "\(limits.maxCount) reports, \(limits.maxBytes) bytes, \(client.configuration.reports.maxAge)",
        ])
    }

    private func path(for report: StallReport) -> String {
        let stamp = report.start.wall.filter { $0 != "-" && $0 != ":" }
        let prefix = report.kind == "snapshot" ? "snapshot" : "stall"
        return "\(directory)/\(prefix)-\(stamp)-\(report.id.prefix(8)).json"
    }
}
