import StallmonReport

/// The pool's section of a starvation's report (`StarvationTracker` adds it): the verdict, the saturation's figures and
/// the culprits, each built as a stall of its own; its event lines are `starvation.begin` … `starvation.end`.
struct StarvationSection: StallSection {
    let starvation: StarvationEvidence

    var eventFamily: String? { "starvation" }

    /// A starved pool's report: each culprit built as a stall of its own (its stack, class, wait, signature), and
    /// the report's signature made of the culprits' set, so `stallmon report` groups starvations by who held the
    /// pool.
    func write(into report: inout StallReport, builder: ReportBuilder) {
        // A culprit's stack refers to the report's `frames` (made of every culprit's samples), not its own table.
        func key(_ frame: StallReport.Frame) -> String {
            "\(frame.address)|\(frame.symbol ?? "")|\(frame.file ?? "")|\(frame.line ?? -1)|\(frame.inlined ?? false)"
        }
        var position: [String: Int] = [:]
        for (index, frame) in report.frames.enumerated() where position[key(frame)] == nil { position[key(frame)] = index }
        let culprits = starvation.culprits.map { culprit in
            let built = builder.build(culprit.snapshot)
            let hottest = built.hottestStack.map { stack in
                HottestStack(frames: stack.frames.compactMap { built.frames.indices.contains($0)
                    ? position[key(built.frames[$0])] : nil }, samples: stack.samples, of: stack.of)
            }
            var described = StallReport.Culprit(
                thread: built.thread, job: culprit.snapshot.job, label: culprit.snapshot.taskLabel?.text,
                busyMs: Double(culprit.snapshot.durationNanoseconds) / 1e6, heldThroughout: culprit.heldThroughout,
                stallClass: built.stallClass, topFrame: built.topFrame, hottestStack: hottest,
                waitingOn: built.waitingOn, signature: built.signature, samples: built.samples.count)
            described.traceId = culprit.snapshot.taskLabel?.traceId
            described.spanId = culprit.snapshot.taskLabel?.spanId
            return described
        }
        report.kind = "starvation"
        report.starvation = StallReport.Starvation(
            verdict: starvation.verdict, saturatedMs: Double(starvation.saturatedNanoseconds) / 1e6,
            oldestWaitMs: Double(starvation.oldestWaitNanoseconds) / 1e6,
            waitedJobs: starvation.waitedJobs.map { Int(clamping: $0) }, jobsRun: starvation.jobsRun.map { Int(clamping: $0) },
            workers: starvation.workers, culprits: culprits, poolWidth: starvation.poolWidth,
            cpuLimit: starvation.cpuLimit)
        report.stallClass = starvation.verdict == "busy" ? .cpu : report.stallClass
        let held = culprits.filter(\.heldThroughout)
        // The culprits that held the pool name it; for a busy pool, every job seen on a worker.
        let signatures = Set((held.isEmpty ? culprits : held).compactMap(\.signature)).sorted()
        report.signature = signatures.isEmpty
            ? nil : StallAggregation.combine(["starvation"] + signatures)
        report.topFrame = (held.first ?? culprits.first)?.topFrame ?? report.topFrame
    }
}
