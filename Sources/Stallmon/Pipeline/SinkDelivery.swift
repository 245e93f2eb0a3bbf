import Foundation
import StallmonReport

/// The sinks' side of the writer: each written report handed to every sink of the monitor that found the stall, a
/// failure logged once per sink and change of state, and the reports a sink refused (a spool it could not link into)
/// offered again from their published files until it takes them. Writer-thread-only.
struct SinkDelivery {
    /// Per sink: the last failure logged, until it succeeds again.
    private var sinkFailing: [String: String] = [:]
    /// Published reports a sink refused, by sink and path: handed to it again from the published file until it
    /// takes them (the latest report of a path only).
    private var refusedBySink: [String: (report: StallReport, path: String, client: PipelineMember, sink: Int)] = [:]

    /// No refused report waits for another offer.
    var isEmpty: Bool { refusedBySink.isEmpty }

    /// Hands a written report to every sink of the monitor that found the stall; failures are logged once per sink
    /// and change of state (StallmonUpload's sink leaves the report on disk for `stallmon upload` to pick up later).
    mutating func handOver(_ written: WrittenStallReport, from client: PipelineMember) {
        for (index, sink) in client.sinks.enumerated() {
            let key = "\(ObjectIdentifier(client))/\(index)"
            let retryKey = key + "/" + written.path
            do {
                try sink.receive(written)
                sinkFailing[key] = nil
                refusedBySink[retryKey] = nil
            } catch {
                // Published all the same (it is on disk): offered to the sink again until it takes it.
                if refusedBySink.count < Self.maxRefusedReports || refusedBySink[retryKey] != nil {
                    refusedBySink[retryKey] = (written.report, written.path, client, index)
                }
                let reason = "\(error)"
                if sinkFailing[key] != reason {
                    sinkFailing[key] = reason
                    client.logger.error("stallmon: a report sink failed", metadata: [
                        "sink": "\(type(of: sink))", "report": "\(written.path)", "error": "\(reason)",
                    ])
                }
            }
        }
    }

    /// Reports refused by a sink kept for another offer, at most (beyond, a refused report is only logged).
    static let maxRefusedReports = 1024

    /// Offers each report a sink refused again, from its published file (a report removed meanwhile is forgotten).
    mutating func offerRefusedAgain() {
        for (retryKey, entry) in refusedBySink {
            guard access(entry.path, F_OK) == 0, entry.client.sinks.indices.contains(entry.sink) else {
                refusedBySink[retryKey] = nil
                continue
            }
            let sink = entry.client.sinks[entry.sink]
            let key = "\(ObjectIdentifier(entry.client))/\(entry.sink)"
            do {
                try sink.receive(WrittenStallReport(report: entry.report, path: entry.path, contentsPath: entry.path))
                refusedBySink[retryKey] = nil
                if sinkFailing[key] != nil {
                    sinkFailing[key] = nil
                    entry.client.logger.notice("stallmon: a report sink takes reports again; refused ones handed over",
                                               metadata: ["sink": "\(type(of: sink))"])
                }
            } catch {
                // Logged once when it began failing (handOver); tried again in a second.
            }
        }
    }
}
