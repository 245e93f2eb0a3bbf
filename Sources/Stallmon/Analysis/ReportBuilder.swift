import Foundation
import StallmonLoop
import StallmonReport

/// Turns a snapshot into a `StallReport`: symbolicates each distinct address once, dedupes frames, picks the top
/// in-app frame. Runs on the writer thread (or in tests).
struct ReportBuilder {
    let symbolicator: Symbolicator
    let process: StallReport.ProcessDescription

    init(symbolicator: Symbolicator) {
        self.symbolicator = symbolicator
        let executable = symbolicator.images.first?.path ?? ""
        process = StallReport.ProcessDescription(pid: getpid(), executable: executable,
                                                 buildId: symbolicator.images.first?.buildId,
                                                 hostname: ReportBuilder.hostname())
    }

    func build(_ snapshot: StallSnapshot) -> StallReport {
        var frames: [StallReport.Frame] = []
        var frameIndices: [FrameKey: [Int]] = [:]
        var samples: [StallReport.Sample] = []
        /// What the thread was blocked on, per target: samples and first sample (for a stable order).
        var waits: [WaitTarget: (count: Int, first: Int)] = [:]
        /// Each sample's wait, when it counts (not taken after the iteration's end).
        var sampleWaits: [WaitTarget?] = []
        var topCounts: [String: (count: Int, first: Int, summary: StallReport.FrameSummary)] = [:]
        var pauses: [UInt64] = []

        /// The frames of one stack, symbolicated once per distinct address, and the innermost in-app frame.
        func expand(_ addresses: [UInt]) -> (indices: [Int], top: StallReport.FrameSummary?) {
            var indices: [Int] = []
            var top: StallReport.FrameSummary?
            for (position, address) in addresses.enumerated() {
                let isReturn = position > 0
                let key = FrameKey(address: address, isReturnAddress: isReturn)
                let expanded: [Int]
                if let known = frameIndices[key] {
                    expanded = known
                } else {
                    let symbolized = symbolicator.symbolize(address, isReturnAddress: isReturn)
                    let physical = StallReport.Frame(
                        address: hex(address), image: symbolized.imageIndex, module: symbolized.module,
                        buildId: symbolized.buildId, offset: symbolized.moduleOffset.map(hex),
                        symbol: symbolized.symbol, symbolOffset: symbolized.symbolOffset.map { Int($0) },
                        file: symbolized.file, line: symbolized.line, inApp: symbolized.inApp)
                    let logical = StallReport.Frame.expanding(physical, inlined: symbolized.inlined,
                                                              executable: symbolicator.executablePath,
                                                              rules: symbolicator.inAppRules)
                    expanded = Array(frames.count..<(frames.count + logical.count))
                    frames += logical
                    frameIndices[key] = expanded
                }
                indices += expanded
                if top == nil, let index = expanded.first(where: { frames[$0].inApp }) {
                    let frame = frames[index]
                    top = StallReport.FrameSummary(symbol: frame.symbol ?? "\(frame.module ?? "?")+\(frame.offset ?? "?")",
                                                   module: frame.module, file: frame.file, line: frame.line)
                }
            }
            return (indices, top)
        }

        for sample in snapshot.samples {
            let (indices, top) = expand(sample.frames)
            if let top {
                let order = topCounts.count
                var entry = topCounts[top.symbol, default: (0, order, top)]
                entry.count += 1
                if entry.summary.line == nil && top.line != nil { entry.summary = top }  // prefer one with file:line
                topCounts[top.symbol] = entry
            }
            if sample.status == .ok { pauses.append(sample.pauseNanoseconds) }
            let offset = sample.capturedAt > snapshot.since ? sample.capturedAt - snapshot.since : 0
            // Idle: taken after the loop's own end of the iteration (exact, needs no symbols, so it works on a stripped
            // binary), or, for a stall without an exact end, a stack of the loop waiting in epoll.
            let afterEnd = Self.capturedAfterEnd(sample, snapshot)
            let idle = sample.status == .ok && (afterEnd || StallAggregation.isIdle(indices, in: frames))
            var built = StallReport.Sample(
                offsetMs: Double(offset) / 1e6, status: sample.status, frames: indices, truncated: sample.truncated,
                label: sample.labelID == 0 ? nil : LooperLabel(id: sample.labelID).name,
                state: sample.threadState.map { String($0) }, idle: idle ? true : nil)
            if sample.unknownImage { built.unknownImage = true }
            sampleWaits.append(afterEnd ? nil : sample.wait)
            if let wait = sample.wait, !afterEnd {
                let order = waits.count
                waits[wait, default: (0, order)].count += 1
                if let holder = sample.holder {
                    built.holderState = holder.state.map { String($0) }
                    built.holderWaiting = holder.waiting
                    built.holderStatus = holder.status
                    if holder.status == .ok { built.holderFrames = expand(holder.frames).indices }
                }
            }
            samples.append(built)
        }

        let analysis = StallAggregation.analyze(frames: frames, samples: samples)
        let tree = analysis.tree
        let hottest = analysis.hottest
        let topFrame = analysis.topFrame
            ?? topCounts.values.sorted { ($0.count, -$0.first) > ($1.count, -$1.first) }.first?.summary
        pauses.sort()
        let captures = StallReport.CaptureCounts(
            attempted: snapshot.samples.count,
            succeeded: snapshot.samples.filter { $0.status == .ok }.count,
            timedOut: snapshot.samples.filter { $0.status == .timedOut }.count,
            pauseMedianUs: pauses.isEmpty ? nil : Double(pauses[pauses.count / 2]) / 1e3,
            pauseMaxUs: pauses.last.map { Double($0) / 1e3 })
        var report = StallReport(
            schema: StallReport.currentSchema, id: snapshot.id, ongoing: snapshot.ongoing, process: process,
            thread: StallReport.ThreadDescription(tid: snapshot.threadID,
                                                  name: threadName(of: snapshot.threadID)),
            loop: snapshot.loopName, thresholdMs: Double(snapshot.thresholdNanoseconds) / 1e6,
            start: StallReport.StartTime(wall: WallClock.iso8601(nanoseconds: snapshot.sinceWall),
                                         monotonicNs: snapshot.since),
            durationMs: Double(snapshot.durationNanoseconds) / 1e6,
            durationSource: snapshot.durationExact ? "loop" : "watchdog",
            label: LooperLabel(id: snapshot.labelID).name, topFrame: topFrame, captures: captures,
            samples: samples, frames: frames, images: symbolicator.images,
            stallClass: snapshot.threadClass, threadStats: snapshot.threadFigures,
            frozenMs: snapshot.frozenNanoseconds > 0 ? Double(snapshot.frozenNanoseconds) / 1e6 : nil,
            signature: analysis.signature,
            hottestStack: hottest, callTree: tree, annotations: snapshot.annotations.isEmpty ? nil : snapshot.annotations)
        if !waits.isEmpty {
            let ordered = waits.sorted { ($0.value.count, -$0.value.first) > ($1.value.count, -$1.value.first) }
                .map(\.key)
            let position = Dictionary(uniqueKeysWithValues: ordered.enumerated().map { ($1, $0) })
            for (index, wait) in sampleWaits.enumerated() {
                report.samples[index].waiting = wait.flatMap { position[$0] }
            }
            report.waitingOn = ordered.enumerated().map { index, wait in
                var entry = StallReport.WaitingOn(kind: wait.kind, syscall: wait.syscall, target: wait.target,
                                                  holderThread: wait.holderThread, holderName: wait.holderName,
                                                  samples: waits[wait]?.count ?? 0)
                if wait.holderThread != nil {
                    Self.describeHolder(&entry, samples: report.samples.filter { $0.waiting == index }, frames: frames)
                }
                return entry
            }
        }
        return report
    }

    /// The holder's hottest stack, the service's own frame on it, and what it was most often blocked in, over the
    /// samples that found the loop waiting on that holder's lock.
    static func describeHolder(_ entry: inout StallReport.WaitingOn, samples: [StallReport.Sample],
                               frames: [StallReport.Frame]) {
        let stacks = samples.compactMap(\.holderFrames).filter { !$0.isEmpty }
        if let hottest = StallAggregation.hottestStack(StallAggregation.callTree(stacks, frames: frames),
                                                       total: stacks.count) {
            entry.holderStack = hottest
            if let index = hottest.frames.first(where: { frames.indices.contains($0) && frames[$0].inApp }) {
                let frame = frames[index]
                let (file, line) = StallAggregation.location(of: frame.functionKey, in: stacks, frames: frames)
                entry.holderTopFrame = StallReport.FrameSummary(symbol: frame.functionKey, module: frame.module,
                                                                file: file ?? frame.file, line: line)
            }
        }
        var counts: [String: (count: Int, first: Int)] = [:]
        for waiting in samples.compactMap(\.holderWaiting) {
            let order = counts.count
            counts[waiting, default: (0, order)].count += 1
        }
        entry.holderWaiting = counts.max { ($0.value.count, -$0.value.first) < ($1.value.count, -$1.value.first) }?.key
    }

    /// The handler ran after the iteration had ended by the loop's own clock (same CLOCK_MONOTONIC): the loop was
    /// already back in its wait when the signal arrived.
    static func capturedAfterEnd(_ sample: RawSample, _ snapshot: StallSnapshot) -> Bool {
        guard snapshot.durationExact, !snapshot.ongoing else { return false }
        let end = snapshot.since &+ snapshot.durationNanoseconds &+ snapshot.frozenNanoseconds
        return sample.capturedAt > end
    }

    private struct FrameKey: Hashable {
        var address: UInt
        var isReturnAddress: Bool
    }

    static func hostname() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
