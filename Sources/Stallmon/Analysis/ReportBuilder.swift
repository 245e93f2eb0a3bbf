import Foundation
import StallmonLoop
import StallmonReport

/// Turns a snapshot into a `StallReport`: symbolicates each distinct address once, dedupes frames, picks the top
/// in-app frame. Runs on the writer thread (or in tests).
package struct ReportBuilder {
    let symbolicator: Symbolicator
    let process: StallReport.ProcessDescription

    init(symbolicator: Symbolicator) {
        self.symbolicator = symbolicator
        let executable = symbolicator.images.first?.path ?? ""
        process = StallReport.ProcessDescription(pid: getpid(), executable: executable,
                                                 buildId: symbolicator.images.first?.buildId,
                                                 hostname: ReportBuilder.hostname())
    }

    func build(_ snapshot: StallEvidence) -> StallReport {
        var table = FrameTable(symbolicator: symbolicator)
        let sampled = Self.samples(of: snapshot, table: &table)
        let analysis = StallAggregation.analyze(frames: table.frames, samples: sampled.samples)
        var report = StallReport(
            schema: StallReport.currentSchema, id: snapshot.id, ongoing: snapshot.ongoing, process: process,
            thread: StallReport.ThreadDescription(tid: snapshot.threadID,
                                                  name: threadName(of: snapshot.threadID)),
            loop: snapshot.loopName, thresholdMs: Double(snapshot.thresholdNanoseconds) / 1e6,
            start: StallReport.StartTime(wall: WallClock.iso8601(nanoseconds: snapshot.sinceWall),
                                         monotonicNs: snapshot.since),
            durationMs: Double(snapshot.durationNanoseconds) / 1e6,
            durationSource: snapshot.durationExact ? "loop" : "watchdog",
            label: LooperLabel(id: snapshot.labelID).name, topFrame: analysis.topFrame ?? sampled.mostFrequentTop,
            captures: Self.captureCounts(snapshot.samples), samples: sampled.samples, frames: table.frames,
            images: symbolicator.images, stallClass: snapshot.threadClass, threadStats: snapshot.threadFigures,
            cpuContention: snapshot.cpuContention,
            frozenMs: snapshot.frozenNanoseconds > 0 ? Double(snapshot.frozenNanoseconds) / 1e6 : nil,
            signature: analysis.signature, hottestStack: analysis.hottest, callTree: analysis.tree,
            annotations: snapshot.annotations.isEmpty ? nil : snapshot.annotations)
        Self.summarizeWaits(&report, sampleWaits: sampled.waits)
        return report
    }

    // MARK: - Steps

    /// The report's samples, built from the snapshot's raw ones; what each waited on (nil when it counts for
    /// nothing: taken after the iteration's end); the innermost in-app frame seen most often, for a report whose
    /// samples have no hottest stack.
    private static func samples(of snapshot: StallEvidence, table: inout FrameTable)
        -> (samples: [StallReport.Sample], waits: [WaitTarget?], mostFrequentTop: StallReport.FrameSummary?) {
        var samples: [StallReport.Sample] = []
        var waits: [WaitTarget?] = []
        var tops = Tally<String>()
        var topSummaries: [String: StallReport.FrameSummary] = [:]
        for sample in snapshot.samples {
            let (indices, top) = table.expand(sample.frames, awaitChain: sample.awaitChain)
            if let top {
                tops.add(top.symbol)
                // The first seen, unless a later one has the file:line it lacks.
                if topSummaries[top.symbol].map({ $0.line == nil && top.line != nil }) ?? true {
                    topSummaries[top.symbol] = top
                }
            }
            let offset = sample.capturedAt > snapshot.since ? sample.capturedAt - snapshot.since : 0
            // Idle: taken after the loop's own end of the iteration (exact, needs no symbols, so it works on a stripped
            // binary), or, for a stall without an exact end, a stack of the loop waiting in epoll.
            let afterEnd = Self.capturedAfterEnd(sample, snapshot)
            let idle = sample.status == .ok && (afterEnd || StallAggregation.isIdle(indices, in: table.frames))
            var built = StallReport.Sample(
                offsetMs: Double(offset) / 1e6, status: sample.status, frames: indices, truncated: sample.truncated,
                label: sample.labelID == 0 ? nil : LooperLabel(id: sample.labelID).name,
                state: sample.threadState.map { String($0) }, idle: idle ? true : nil)
            if sample.unknownImage { built.unknownImage = true }
            if sample.awaitChain?.truncated == true { built.awaitChainTruncated = true }
            waits.append(afterEnd ? nil : sample.wait)
            if sample.wait != nil, !afterEnd, let holder = sample.holder {
                built.holderState = holder.state.map { String($0) }
                built.holderWaiting = holder.waiting
                built.holderStatus = holder.status
                if holder.status == .ok { built.holderFrames = table.expand(holder.frames).indices }
            }
            samples.append(built)
        }
        return (samples, waits, tops.mostFrequent.flatMap { topSummaries[$0] })
    }

    private static func captureCounts(_ samples: [RawSample]) -> StallReport.CaptureCounts {
        let pauses = samples.filter { $0.status == .ok }.map(\.pauseNanoseconds).sorted()
        return StallReport.CaptureCounts(
            attempted: samples.count,
            succeeded: samples.filter { $0.status == .ok }.count,
            timedOut: samples.filter { $0.status == .timedOut }.count,
            pauseMedianUs: pauses.isEmpty ? nil : Double(pauses[pauses.count / 2]) / 1e3,
            pauseMaxUs: pauses.last.map { Double($0) / 1e3 })
    }

    /// What the thread waited on, most often first, each sample pointing at its entry, and each lock's holder.
    private static func summarizeWaits(_ report: inout StallReport, sampleWaits: [WaitTarget?]) {
        var tally = Tally<WaitTarget>()
        for wait in sampleWaits.compactMap({ $0 }) { tally.add(wait) }
        guard !tally.isEmpty else { return }
        let ordered = tally.ordered
        let position = Dictionary(uniqueKeysWithValues: ordered.enumerated().map { ($1, $0) })
        for (index, wait) in sampleWaits.enumerated() {
            report.samples[index].waiting = wait.flatMap { position[$0] }
        }
        report.waitingOn = ordered.enumerated().map { index, wait in
            var entry = StallReport.WaitingOn(kind: wait.kind, syscall: wait.syscall, target: wait.target,
                                              holderThread: wait.holderThread, holderName: wait.holderName,
                                              samples: tally.count(of: wait))
            if wait.holderThread != nil {
                describeHolder(&entry, samples: report.samples.filter { $0.waiting == index }, frames: report.frames)
            }
            return entry
        }
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
    static func capturedAfterEnd(_ sample: RawSample, _ snapshot: StallEvidence) -> Bool {
        if sample.afterJobEnded { return true }
        guard snapshot.durationExact, !snapshot.ongoing else { return false }
        let end = snapshot.since &+ snapshot.durationNanoseconds &+ snapshot.frozenNanoseconds
        return sample.capturedAt > end
    }

    /// The report's frame table: each distinct address symbolicated once, its inlined functions frames of their own.
    private struct FrameTable {
        private struct Key: Hashable {
            var address: UInt
            var isReturnAddress: Bool
            /// A resume point of an await chain.
            var isAsync = false
        }

        let symbolicator: Symbolicator
        private(set) var frames: [StallReport.Frame] = []
        private var indices: [Key: [Int]] = [:]

        init(symbolicator: Symbolicator) {
            self.symbolicator = symbolicator
        }

        /// The frames of one stack (program counter, then return addresses), continued through the job's await
        /// chain after the async function's frame the chain belongs to, and its innermost in-app frame.
        mutating func expand(_ addresses: [UInt], awaitChain: AwaitChain? = nil)
            -> (indices: [Int], top: StallReport.FrameSummary?) {
            var stack = addresses.enumerated().map { position, address in
                frames(of: Key(address: address, isReturnAddress: position > 0))
            }
            if let chain = awaitChain, stack.indices.contains(chain.attachedFrame) {
                var resumed = chain.resumePoints.map {
                    frames(of: Key(address: $0, isReturnAddress: false, isAsync: true))
                }
                // Should the context below the frame's pointer be its callee's, the chain begins where the frame's own
                // partial function starts: that function is on the stack already. (Not the same function's name
                // alone: a recursive caller resumes in a partial function of the same name.)
                if let first = chain.resumePoints.first, let attached = stack[chain.attachedFrame].last,
                   let offset = frames[attached].symbolOffset {
                    let looked = Symbolicator.lookupAddress(addresses[chain.attachedFrame],
                                                            isReturnAddress: chain.attachedFrame > 0)
                    if looked &- UInt(offset) == first { resumed.removeFirst() }
                }
                stack.insert(contentsOf: resumed, at: chain.attachedFrame + 1)
            }
            let indices = stack.flatMap { $0 }
            let top = indices.first { frames[$0].inApp }.map { index in
                let frame = frames[index]
                return StallReport.FrameSummary(symbol: frame.symbol ?? "\(frame.module ?? "?")+\(frame.offset ?? "?")",
                                                module: frame.module, file: frame.file, line: frame.line)
            }
            return (indices, top)
        }

        private mutating func frames(of key: Key) -> [Int] {
            if let known = indices[key] { return known }
            let symbolized = symbolicator.symbolize(key.address, isReturnAddress: key.isReturnAddress)
            let physical = StallReport.Frame(
                address: hex(key.address), image: symbolized.imageIndex, module: symbolized.module,
                buildId: symbolized.buildId, offset: symbolized.moduleOffset.map(hex),
                symbol: symbolized.symbol, symbolOffset: symbolized.symbolOffset.map { Int($0) },
                file: symbolized.file, line: symbolized.line, inApp: symbolized.inApp, async: key.isAsync ? true : nil)
            let logical = StallReport.Frame.expanding(physical, inlined: symbolized.inlined,
                                                      executable: symbolicator.executablePath,
                                                      rules: symbolicator.inAppRules)
            let expanded = Array(frames.count..<(frames.count + logical.count))
            frames += logical
            indices[key] = expanded
            return expanded
        }
    }

    /// Counts of values, ordered most frequent first, ties in the order first seen.
    private struct Tally<Value: Hashable> {
        private var counts: [Value: (count: Int, first: Int)] = [:]

        mutating func add(_ value: Value) {
            let order = counts.count
            counts[value, default: (0, order)].count += 1
        }

        var isEmpty: Bool { counts.isEmpty }
        func count(of value: Value) -> Int { counts[value]?.count ?? 0 }
        var ordered: [Value] {
            counts.sorted { ($0.value.count, -$0.value.first) > ($1.value.count, -$1.value.first) }.map(\.key)
        }
        var mostFrequent: Value? { ordered.first }
    }

    static func hostname() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count - 1) == 0 else { return "" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
