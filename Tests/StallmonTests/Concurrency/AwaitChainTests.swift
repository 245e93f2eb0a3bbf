import Foundation
import StallmonReport
import StallmonTestSupport
import Testing

/// The await chain of async stalls, on real Swift Concurrency: the fixture's tasks await through four functions of
/// their own (each suspending once, for real) before the innermost blocks its worker.
@Suite("Await chains of async stalls", .serialized)
struct AwaitChainTests {
    /// The hottest stack's frames, innermost first.
    static func hottest(_ report: StallReport) -> [StallReport.Frame] {
        (report.hottestStack?.frames ?? []).compactMap { report.frames.indices.contains($0) ? report.frames[$0] : nil }
    }

    /// The report whose hottest stack has a frame naming `function`.
    static func report(through function: String, in run: ConcurrencyStallMonitorTests.Run) -> StallReport? {
        run.reports.first { hottest($0).contains { $0.symbol?.contains(function) == true } }
    }

    /// Checks that the hottest stack holds `physical` on the thread's own stack, then each of `awaiting` in order as
    /// async frames with a file and line of the fixture.
    static func expectChain(_ report: StallReport?, physical: String, awaiting: [String],
                            sourceLocation: SourceLocation = #_sourceLocation) {
        guard let report else {
            Issue.record("no report through \(physical)", sourceLocation: sourceLocation)
            return
        }
        let frames = hottest(report)
        let described = frames.map { ($0.async == true ? "[async] " : "") + ($0.symbol ?? "?") }
        // The outermost frame of that function on the thread's stack: its partial function, which the chain continues.
        guard let start = frames.lastIndex(where: { $0.symbol?.contains(physical) == true && $0.async != true })
        else {
            Issue.record("\(physical) is not on the stack: \(described)", sourceLocation: sourceLocation)
            return
        }
        var position = start
        for function in awaiting {
            guard let found = frames[(position + 1)...].firstIndex(where: { $0.symbol?.contains(function) == true })
            else {
                Issue.record("\(function) does not await after \(frames[position].symbol ?? "?"): \(described)",
                             sourceLocation: sourceLocation)
                return
            }
            let frame = frames[found]
            #expect(frame.async == true, "\(function) is an await-chain frame", sourceLocation: sourceLocation)
            #expect(frame.file?.hasSuffix("StallmonAsyncFixture/main.swift") == true && (frame.line ?? 0) > 0,
                    "\(function) at \(frame.file ?? "-"):\(frame.line ?? 0)", sourceLocation: sourceLocation)
            #expect(frame.inApp, sourceLocation: sourceLocation)
            position = found
        }
        // The chain's frames follow the function it continues, and nothing of the thread's stack sits among them.
        let chain = frames[(start + 1)...].prefix { $0.async == true }
        #expect(chain.count >= awaiting.count, "\(described)", sourceLocation: sourceLocation)
    }

    @Test("checks at start refused: stalls still reported, stacks ending where the job began, with no label")
    func refusedChecksReadNothing() async throws {
        let run = try await ConcurrencyStallMonitorTests.run("checks-refused")
        #expect(run.status == 0, "\(run.output) \(run.errors)")
        #expect(run.value("refused") == "-1 -1 -1 -1", "every verdict refused: \(run.output)")
        for physical in ["auditLedger", "readLedgerRecord"] {
            let report = try #require(Self.report(through: physical, in: run), "\(run.reports.map(\.topFrame))")
            let frames = Self.hottest(report)
            #expect(!frames.contains { $0.async == true }, "\(physical): no await chain: \(frames.map(\.symbol))")
            #expect(report.label == "", "\(physical): no label: \(report.label)")
            #expect(report.job?.kind == (physical == "auditLedger" ? "actor" : "task"))
        }
    }

    @Test("a task, a group's child, a lock, an actor's method, an actor's drain job, main-actor code: each stall names its awaiting functions")
    func chains() async throws {
        let run = try await ConcurrencyStallMonitorTests.run("await-chains")
        #expect(run.status == 0, "\(run.output) \(run.errors)")
        #expect(run.value("layout") == "1", "the runtime's layout check passed")
        #expect(run.value("drain") == "1 1", "the drain check passed: chains and the active task")
        // The held actor's holder and the method that waited for it are two stalls.
        #expect(run.reports.count == 8, "\(run.reports.map(\.topFrame))")
        let layers = ["fetchLedger", "loadAccount", "handleRequest"]
        let cpu = run.reports.first { $0.topFrame?.symbol.contains("spinCPU") == true
            && Self.hottest($0).contains { $0.symbol?.contains("readLedgerRecord") == true } }
        Self.expectChain(cpu, physical: "readLedgerRecord", awaiting: layers)
        let lock = run.reports.first { $0.topFrame?.symbol.contains("acquireAndRelease") == true }
        Self.expectChain(lock, physical: "readLedgerRecord", awaiting: layers)
        #expect(lock?.waitingOn?.first?.kind == "lock")
        // The group's child and the actor both end in a sleep: told apart by their outermost callers.
        let sleeps = run.reports.filter { $0.topFrame?.symbol.contains("blockingSleep") == true }
        #expect(sleeps.count == 2)
        let child = sleeps.first { !Self.hottest($0).contains { $0.symbol?.contains("Accounts.settle") == true } }
        Self.expectChain(child, physical: "readLedgerRecord", awaiting: layers)
        let actor = Self.report(through: "Accounts.settle", in: run)
        Self.expectChain(actor, physical: "readLedgerRecord",
                         awaiting: ["fetchLedger", "loadAccount", "Accounts.settle"])
        // A method the call had to wait for runs in the actor's drain job: no task of its own (no task id), yet the
        // awaiting functions and the request's label of the task it ran then.
        let drained = Self.report(through: "Vault.audit", in: run)
        Self.expectChain(drained, physical: "auditLedger", awaiting: ["auditRequest", "auditWhileHeld"])
        #expect(drained?.job?.kind == "actor" && drained?.job?.taskId == nil, "\(String(describing: drained?.job))")
        #expect(drained?.label == "POST /audit")
        let holder = Self.report(through: "Vault.hold", in: run)
        #expect(holder?.job?.kind == "task" && holder?.label.isEmpty == true, "\(String(describing: holder?.label))")
        let main = Self.report(through: "readOnMain", in: run)
        #expect(main?.loop == "main-actor")
        Self.expectChain(main, physical: "readOnMain", awaiting: ["fetchOnMain", "loadOnMain", "handleOnMain"])
        // Every chain ends at its task's root, the runtime's completion (not in-app).
        for report in [cpu, lock, child, actor, drained, main].compactMap({ $0 }) {
            let last = Self.hottest(report).last { $0.async == true }
            #expect(last?.symbol?.contains("completeTask") == true, "\(last?.symbol ?? "-")")
            #expect(report.samples.allSatisfy { $0.awaitChainTruncated == nil })
        }
    }

    @Test("async code a Looper's and an event loop's executor run: the loop's stall names its awaiting functions")
    func loopChains() async throws {
        let run = try await ConcurrencyStallMonitorTests.run("loop-chains")
        #expect(run.status == 0, "\(run.output) \(run.errors)")
        #expect(run.value("drain") == "1 1", "the checks at start passed")
        #expect(run.reports.count == 2, "\(run.reports.map(\.loop))")
        // An actor pinned to the Looper: the stall is the loop's, its stack the loop thread's, then the callers.
        let looper = Self.report(through: "Teller.post", in: run)
        #expect(looper?.loop == "chain-loop" && looper?.job == nil)
        Self.expectChain(looper, physical: "recordDeposit", awaiting: ["handleDeposit"])
        // An actor pinned to a SwiftNIO event loop (`EventLoop.executor`), watched by NIOStallMonitor.
        let eventLoop = Self.report(through: "Clerk.withdraw", in: run)
        #expect(eventLoop?.loop.hasPrefix("NIO-ELT-") == true, "\(eventLoop?.loop ?? "-")")
        Self.expectChain(eventLoop, physical: "recordWithdrawal", awaiting: ["handleWithdrawal"])
        for report in [looper, eventLoop].compactMap({ $0 }) {
            let last = Self.hottest(report).last { $0.async == true }
            #expect(last?.symbol?.contains("completeTask") == true, "\(last?.symbol ?? "-")")
        }
    }

    @Test("a chain longer than stallmon follows is cut at 64 resume points; report --chains tells call sites apart")
    func truncatedAndGrouped() async throws {
        let run = try await ConcurrencyStallMonitorTests.run("await-chains")
        let deep = try #require(Self.report(through: "descend", in: run), "\(run.reports.map(\.topFrame))")
        let descents = Self.hottest(deep).filter { $0.async == true && $0.symbol?.contains("descend") == true }
        #expect(descents.count >= 63 && descents.count <= 64, "\(descents.count)")
        #expect(!Self.hottest(deep).contains { $0.symbol?.contains("completeTask") == true }, "the root is cut off")
        #expect(deep.samples.contains { $0.awaitChainTruncated == true })

        // The group's child and the actor's method block in the same helper through the same two innermost layers
        // (one signature, one group); `report --chains` names the two callers apart, without the compiler's thunks.
        let output = run.directory + "/../summary.json"
        let status = try await offThePool {
            ChildProcess.run(try StallmonExecutable.url().path, ["report", run.directory, "--chains", "--format", "json"],
                             environment: StallmonExecutable.environment(), outputPath: output)
        }
        #expect(status == 0)
        let summary = try JSONDecoder().decode(StallSummary.self, from: Data(contentsOf: URL(fileURLWithPath: output)))
        let sleeps = try #require(summary.groups.first { $0.topFrame.contains("blockingSleep") }, "\(summary.groups)")
        let chains = sleeps.chains ?? []
        #expect(sleeps.count == 2 && chains.count == 2, "\(chains)")
        #expect(chains.allSatisfy { $0.stalls == 1 && $0.functions.first?.contains("AwaitChains.fetchLedger") == true })
        #expect(chains.contains { $0.functions.contains { $0.contains("handleRequest") } })
        #expect(chains.contains { $0.functions.contains { $0.contains("Accounts.settle") } })
        #expect(chains.allSatisfy { !$0.functions.contains { $0.contains("partial function for") || $0.contains("thunk") } },
                "\(chains)")
        #expect(summary.groups.allSatisfy { $0.chains?.isEmpty != true })
    }

    @Test("thousands of short jobs, snapshots every 10 ms: no crash, and no chain read for one job is another's")
    func churn() async throws {
        let run = try await ConcurrencyStallMonitorTests.run("chain-churn", thresholdMs: 20, keepingNearMisses: true)
        #expect(run.status == 0, "\(run.output) \(run.errors)")
        let snapshotsTaken = Int(run.value("snapshots") ?? "") ?? 0
        #expect(snapshotsTaken >= 20, "\(run.output)")
        let names = (try? FileManager.default.contentsOfDirectory(atPath: run.directory)) ?? []
        let snapshots = names.filter { $0.hasPrefix("snapshot-") && $0.hasSuffix(".json") }
            .compactMap { try? ReportReader.read(run.directory + "/" + $0) }
        var checked = 0
        var drained = 0
        for report in run.reports + snapshots {
            for sample in report.samples where sample.status == .ok {
                let frames = sample.frames.compactMap { report.frames.indices.contains($0) ? report.frames[$0] : nil }
                let own = frames.filter { $0.async != true }.compactMap(\.symbol)
                let awaiting = frames.filter { $0.async == true }.compactMap(\.symbol)
                guard !awaiting.isEmpty else { continue }
                for (mine, theirs) in [("alpha", "beta"), ("beta", "alpha")]
                where own.contains(where: { $0.contains("ChurnChains.\(mine)Inner") }) {
                    checked += 1
                    // Taken in the shared actor's drain job, which ran both kinds one after another.
                    if report.job?.kind == "actor" { drained += 1 }
                    #expect(!awaiting.contains { $0.contains("ChurnChains.\(theirs)") },
                            "a \(mine) job's chain names \(theirs): \(awaiting)")
                    // Its outer function is on the thread's stack when the inner one did not suspend (Task.yield
                    // returns at once when nothing else waits for the worker), else in the chain.
                    #expect((own + awaiting).contains { $0.contains("ChurnChains.\(mine)Outer") }, "\(own) \(awaiting)")
                }
            }
        }
        #expect(checked >= 20, "samples of jobs with a chain checked: \(checked)")
        #expect(run.value("drain") == "1 1", "the drain check passed")
        #expect(drained >= 5, "samples of drain jobs with a chain checked: \(drained)")

        // Labels read while thousands of labelled tasks begin and end: never the other kind's. A stall's label is read
        // at its begin and its samples are of the same job. (A starvation's culprits are not compared: a culprit's
        // label is its job's at the detection, and its worker is sampled over the whole saturation, the jobs that
        // followed included, as the schema says.) A snapshot's worker is
        // read, then sampled, so only a job well inside its 30 ms (busy 2 to 20 ms) is surely the same job in both.
        var labelled = 0
        func churnFrames(_ stack: HottestStack?, in report: StallReport) -> [String] {
            (stack?.frames ?? []).compactMap { report.frames.indices.contains($0) ? report.frames[$0].symbol : nil }
                .filter { $0.contains("ChurnChains.") && !$0.contains("ChurnChains.Shared.") }  // both kinds'
        }
        var labelledStacks: [(label: String, stack: [String])] = []
        // A drain job's label is that of the task it ran at the detection, while its samples go on through the tasks
        // it runs next: not compared (a snapshot's drain entry is, as its label is read for the task its sample
        // caught).
        for report in run.reports where report.job?.kind != "actor" {
            if report.kind == nil && !report.label.isEmpty {
                labelledStacks.append((report.label, churnFrames(report.hottestStack, in: report)))
            }
        }
        for (label, stack) in labelledStacks where !stack.isEmpty {
            labelled += 1
            #expect(stack.allSatisfy { $0.contains("ChurnChains.\(label)") }, "a job labelled \(label) runs \(stack)")
        }
        for snapshot in snapshots {
            for entry in snapshot.snapshot?.entries ?? [] where entry.kind == "worker" {
                guard let label = entry.label, let busy = entry.busyMs, busy >= 2, busy <= 20,
                      let index = entry.sample, snapshot.samples.indices.contains(index),
                      snapshot.samples[index].status == .ok else { continue }
                let symbols = snapshot.samples[index].frames.compactMap {
                    snapshot.frames.indices.contains($0) ? snapshot.frames[$0].symbol : nil
                }
                guard symbols.contains(where: { $0.contains("ChurnChains.") }) else { continue }
                labelled += 1
                #expect(symbols.contains { $0.contains("ChurnChains.\(label)") },
                        "a worker labelled \(label) runs \(symbols.filter { $0.contains("ChurnChains") })")
            }
        }
        #expect(labelled >= 10, "labelled stalls and workers checked: \(labelled)")
    }
}
