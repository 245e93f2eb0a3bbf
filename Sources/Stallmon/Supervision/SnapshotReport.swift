import CStallmonLoopShims
import Foundation
import StallmonLoop
import StallmonReport

/// A snapshot on demand as a report (`kind: snapshot`): every part the watchdog gathered, each pointing at its own
/// sample, symbolicated as a stall's would be; and the directory's snapshots kept to the newest.
enum SnapshotReport {
    /// Snapshots kept in a report directory (the newest; they are never uploaded).
    static let kept = 100

    /// Removes all but the newest `count` snapshot reports (their names sort by time).
    static func keepNewest(in directory: String, count: Int) {
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [])
            .filter { $0.hasPrefix("snapshot-") && $0.hasSuffix(".json") }.sorted()
        for name in names.dropLast(count) { unlink(directory + "/" + name) }
    }

    /// A snapshot's report: the parts' samples symbolicated as one stall's would be, each part pointing at its own.
    static func build(_ parts: [SnapshotCoordinator.Part], missing: Int, builder: ReportBuilder) -> StallReport {
        let now = cstallmon_monotonic_ns()
        let wall = WallClock.nowNanoseconds()
        var sampleOf: [Int: Int] = [:]
        var samples: [RawSample] = []
        for (index, part) in parts.enumerated() {
            guard let sample = part.sample else { continue }
            sampleOf[index] = samples.count
            samples.append(sample)
        }
        let first = parts.first { $0.tid != nil }
        let snapshot = StallEvidence(
            id: UUID().uuidString.lowercased(), loopName: "snapshot", threadID: first?.tid ?? 0,
            thresholdNanoseconds: 0, since: now, sinceWall: wall, durationNanoseconds: 0, durationExact: false,
            ongoing: false, elapsedAtDetection: 0, labelID: 0, samples: samples)
        var report = builder.build(snapshot)
        report.kind = "snapshot"
        report.durationSource = "snapshot"
        report.signature = nil
        report.topFrame = nil
        report.hottestStack = nil
        report.callTree = nil
        report.stallClass = nil
        report.threadStats = nil
        report.annotations = missing > 0 ? ["unanswered": "\(missing)"] : nil
        let entries = parts.enumerated().map { index, part -> StallReport.Snapshot.Entry in
            let sample = sampleOf[index]
            var topFrame: StallReport.FrameSummary?
            if let sample, report.samples.indices.contains(sample),
               let frame = report.samples[sample].frames.first(where: { report.frames.indices.contains($0) && report.frames[$0].inApp }) {
                let described = report.frames[frame]
                topFrame = StallReport.FrameSummary(symbol: described.symbol ?? described.address,
                                                    file: described.file, line: described.line)
            }
            let label = part.taskLabel?.text ?? (part.labelID == 0 ? nil : LooperLabel(id: part.labelID).name)
            var entry = StallReport.Snapshot.Entry(
                name: part.name, kind: part.kind,
                thread: part.tid.map { StallReport.ThreadDescription(tid: $0, name: threadName(of: $0)) },
                state: part.busySince == nil ? "idle" : "busy",
                busyMs: part.busySince.map { Double(now &- min(now, $0)) / 1e6 }, label: label, job: part.job,
                sample: sample, topFrame: topFrame, note: part.note)
            entry.traceId = part.taskLabel?.traceId
            entry.spanId = part.taskLabel?.spanId
            return entry
        }
        report.snapshot = StallReport.Snapshot(entries: entries)
        return report
    }
}
