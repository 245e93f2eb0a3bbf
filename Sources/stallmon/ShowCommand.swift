import ArgumentParser
import Foundation
import Stallmon
import StallmonReport

/// `stallmon show REPORT`: one stall with a readable stack.
struct ShowCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show",
        abstract: "Print one stall report with its most common stack.",
        discussion: """
            Text output names the loop, thread, duration, what the loop was running, why (cpu, blocked, starved or \
            throttled, with where the thread's time went and what withheld the CPU), the annotations, and the hottest stack (the path most samples \
            share) innermost frame first with file:line; frames of your own code are marked with '>'. With \
            --format json, prints the report itself (schema stallmon.report/1).

            Exit status: 0 when every named report was shown, 1 otherwise.
            """)

    @Argument(help: "Report file(s).")
    var reports: [String]

    @Option(help: "Output format: text or json.")
    var format: OutputFormat = .text

    func validate() throws {
        guard !reports.isEmpty else { throw ValidationError("name at least one report file") }
    }

    func run() throws {
        var failures = 0
        for (index, path) in reports.enumerated() {
            do {
                let report = try ReportReader.read(path)
                switch format {
                case .json:
                    let encoder = JSONEncoder()
                    encoder.outputFormatting = [.prettyPrinted, .withoutEscapingSlashes]
                    print(String(decoding: try encoder.encode(report), as: UTF8.self))
                case .text:
                    if index > 0 { print("") }
                    print(ReportText.render(report, path: path), terminator: "")
                }
            } catch let error as ReportReadError {
                warn(error.description)
                failures += 1
            }
        }
        if failures > 0 { throw ExitCode(1) }
    }
}

/// The human form of one report.
enum ReportText {
    static func render(_ report: StallReport, path: String) -> String {
        if let starvation = report.starvation { return renderStarvation(report, starvation, path: path) }
        if let snapshot = report.snapshot { return renderSnapshot(report, snapshot, path: path) }
        var out = "Stall \(report.id)\(report.ongoing ? "  [ONGOING when written]" : "")\n"
        out += "  file:     \(path)\n"
        out += "  loop:     \(report.loop)  thread \(report.thread.tid) \"\(report.thread.name)\"  "
            + "pid \(report.process.pid) on \(report.process.hostname)\n"
        out += "  started:  \(report.start.wall)\n"
        let measuredBy = report.job == nil ? "measured by the loop" : "measured by the job's worker"
        out += "  lasted:   \(ms(report.durationMs)) (threshold \(ms(report.thresholdMs)); "
            + "\(report.durationSource == "loop" ? measuredBy : "estimated by the watchdog"))\n"
        if let hang = report.hang {
            out += "  hang:     past \(ms(hang.afterMs)): " + (hang.action == "abort"
                ? "the process was ended with SIGABRT (hang_action = abort) after this report"
                : "systemd's watchdog stopped being fed (systemd_hang_after_ms)") + "\n"
        }
        if let job = report.job {
            out += "  job:      \(job.kind)\(job.taskId.map { " \($0)" } ?? "")"
                + "\(job.taskName.map { " \"\($0)\"" } ?? ""), priority \(job.priority), on the "
                + (job.executor == "main" ? "main actor" : "global executor") + "\n"
        }
        if !report.label.isEmpty {
            out += "  running:  \(report.label)"
            if let mode = report.mode, mode != "default" { out += "  (in run-loop mode \(mode))" }
            if let phase = report.phase { out += "  (\(phase) phase)" }
            out += "\n"
        }
        if let trace = Self.trace(report.traceId, report.spanId) { out += "  trace:    \(trace)\n" }
        if let top = report.topFrame { out += "  top:      \(top.displayName)\n" }
        let captures = report.captures
        out += "  samples:  \(captures.attempted) taken, \(captures.succeeded) with a stack"
        if captures.timedOut > 0 { out += ", \(captures.timedOut) timed out" }
        if let median = captures.pauseMedianUs { out += "; loop paused \(String(format: "%.1f", median)) µs median" }
        out += "\n"
        if let stallClass = report.stallClass {
            out += "  why:      \(stallClass.rawValue)"
            if let figures = report.threadStats {
                out += String(format: " — of %.1f ms watched: on CPU %.1f ms, waiting for a CPU %.1f ms, asleep %.1f ms; "
                              + "%d voluntary / %d involuntary switches", figures.windowMs, figures.cpuMs,
                              figures.runDelayMs, figures.sleepMs, figures.voluntarySwitches,
                              figures.involuntarySwitches)
            }
            out += "\n"
        }
        out += Self.contentionLines(report)
        for wait in (report.waitingOn ?? []).prefix(3) {
            out += "  waiting:  \(wait.syscall)" + (wait.target.map { " on \($0)" } ?? "")
                + " (\(wait.samples) of \(report.samples.count) samples)\n"
            out += holderLines(wait, report)
        }
        if let frozen = report.frozenMs { out += "  frozen:   \(ms(frozen)) of process freeze excluded\n" }
        if let signature = report.signature { out += "  group:    signature \(signature)\n" }
        if let suppressed = report.suppressedBefore, suppressed > 0 {
            out += "  also:     \(suppressed) earlier stall(s) of this signature got no report (rate limit)\n"
        }
        for (key, value) in (report.annotations ?? [:]).sorted(by: { $0.key < $1.key }) {
            out += "  \(key): \(value)\n"
        }

        let stack: [Int]
        if let hottest = report.hottestStack, !hottest.frames.isEmpty {
            stack = hottest.frames
            out += "\nHottest stack, shared by \(hottest.samples) of \(hottest.of) samples, innermost first:\n"
        } else if let (common, count) = report.mostCommonStack() {
            stack = common
            out += "\nStack shared by \(count) of \(report.samples.count) samples, innermost first:\n"
        } else {
            return out + "\n  (no stack captured)\n"
        }
        out += frameLines(stack, report)
        if stack.contains(where: { report.frames.indices.contains($0) && report.frames[$0].async == true }) {
            out += "  ([async]: an async function awaiting the frame above, at the line where it resumes)"
                + "\n"
        }
        if report.samples.contains(where: { $0.awaitChainTruncated == true }) {
            out += "  (the await chain was longer than \(AwaitChain.maxResumePoints) resume points: "
                + "its outermost callers are not shown)\n"
        }
        return out
    }

    /// A snapshot on demand: each loop, pool and busy worker, what it ran, and its stack sample.
    private static func renderSnapshot(_ report: StallReport, _ snapshot: StallReport.Snapshot,
                                       path: String) -> String {
        var out = "Snapshot \(report.id)\n"
        out += "  file:     \(path)\n"
        out += "  process:  pid \(report.process.pid) on \(report.process.hostname), taken \(report.start.wall)\n"
        if let unanswered = report.annotations?["unanswered"] {
            out += "  missing:  \(unanswered) watchdog(s) did not answer in time\n"
        }
        for entry in snapshot.entries {
            out += "\n  \(entry.kind) \(entry.name)"
            if let thread = entry.thread { out += "  thread \(thread.tid) \"\(thread.name)\"" }
            out += "\n    state:  \(entry.state)\(entry.busyMs.map { " for \(ms($0))" } ?? "")\n"
            if let note = entry.note { out += "    pool:   \(note)\n" }
            if let job = entry.job {
                out += "    job:    \(job.kind)\(job.taskId.map { " \($0)" } ?? "")"
                    + "\(job.taskName.map { " \"\($0)\"" } ?? ""), priority \(job.priority)\n"
            }
            if let label = entry.label, !label.isEmpty { out += "    running: \(label)\n" }
            if let trace = Self.trace(entry.traceId, entry.spanId) { out += "    trace:  \(trace)\n" }
            if let top = entry.topFrame { out += "    top:    \(top.displayName)\n" }
            if let index = entry.sample, report.samples.indices.contains(index) {
                let sample = report.samples[index]
                if sample.status != .ok { out += "    stack:  \(sample.status.rawValue)\n"; continue }
                out += "    stack:\n" + frameLines(Array(sample.frames.prefix(12)), report, indent: "      ")
                if sample.frames.count > 12 { out += "        … \(sample.frames.count - 12) more\n" }
            }
        }
        return out
    }

    /// A starved pool: how long, how many waited, then each culprit with its job, why and its hottest stack.
    private static func renderStarvation(_ report: StallReport, _ starvation: StallReport.Starvation,
                                         path: String) -> String {
        var out = "Starvation \(report.id)\(report.ongoing ? "  [ONGOING when written]" : "")\n"
        out += "  file:     \(path)\n"
        out += "  pool:     \(report.loop)  \(starvation.workers) workers, all busy  pid \(report.process.pid) on "
            + "\(report.process.hostname)\n"
        out += "  started:  \(report.start.wall)\n"
        out += "  lasted:   saturated \(ms(starvation.saturatedMs)); the oldest job waited "
            + "\(ms(starvation.oldestWaitMs)) (threshold \(ms(report.thresholdMs)))\n"
        if let waited = starvation.waitedJobs, let run = starvation.jobsRun {
            out += "  jobs:     \(waited) waited past the threshold; \(run) ran meanwhile\n"
        } else {
            out += "  jobs:     not counted (pool_statistics = off)\n"
        }
        let verdicts = [
            "blocked": "blocked: workers held by jobs that waited on something",
            "cpu": "cpu: workers held by jobs that computed throughout",
            "busy": "busy: the workers ran many jobs, none held one throughout (more work than workers)",
        ]
        out += "  why:      \(verdicts[starvation.verdict] ?? starvation.verdict)\n"
        if let width = starvation.poolWidth, let limit = starvation.cpuLimit, Double(width) > limit.rounded(.up) {
            out += "  limit:    the pool runs up to \(width) workers at once, one per CPU the process may use, under a "
                + "CPU limit of \(Self.cpus(limit))"
                + ": its bursts use up the quota and throttle the whole process\n"
        }
        if let signature = report.signature { out += "  group:    signature \(signature)\n" }
        if let suppressed = report.suppressedBefore, suppressed > 0 {
            out += "  also:     \(suppressed) earlier starvation(s) of this signature got no report (rate limit)\n"
        }
        for (number, culprit) in starvation.culprits.enumerated() {
            out += "\nCulprit \(number + 1): thread \(culprit.thread.tid) \"\(culprit.thread.name)\", busy "
                + "\(ms(culprit.busyMs))\(culprit.heldThroughout ? ", held its worker throughout" : "")\n"
            if let job = culprit.job {
                out += "  job:      \(job.kind)\(job.taskId.map { " \($0)" } ?? "")"
                    + "\(job.taskName.map { " \"\($0)\"" } ?? ""), priority \(job.priority)\n"
            }
            if let label = culprit.label { out += "  running:  \(label)\n" }
            if let trace = Self.trace(culprit.traceId, culprit.spanId) { out += "  trace:    \(trace)\n" }
            if let top = culprit.topFrame { out += "  top:      \(top.displayName)\n" }
            if let stallClass = culprit.stallClass { out += "  why:      \(stallClass.rawValue)\n" }
            for wait in (culprit.waitingOn ?? []).prefix(2) {
                out += "  waiting:  \(wait.syscall)" + (wait.target.map { " on \($0)" } ?? "")
                    + " (\(wait.samples) of \(culprit.samples) samples)\n"
            }
            if let hottest = culprit.hottestStack, !hottest.frames.isEmpty {
                out += "  stack, \(hottest.samples) of \(hottest.of) samples, innermost first:\n"
                out += frameLines(Array(hottest.frames.prefix(16)), report, indent: "  ")
            } else {
                out += "  (no stack captured)\n"
            }
        }
        return out
    }

    /// A CPU limit as `show` writes it: `0.2 CPU`, `2 CPU` (three decimals at most).
    private static func cpus(_ value: Double) -> String {
        String(format: "%g CPU", (value * 1000).rounded() / 1000)
    }

    /// What withheld the CPU: the limit (one sentence when it caused the stall), pressure, steal, and a watchdog
    /// held back by the same limit.
    private static func contentionLines(_ report: StallReport) -> String {
        guard let contention = report.cpuContention else { return "" }
        var out = ""
        if let limit = contention.limit, let periods = contention.periods,
           let throttled = contention.throttledPeriods, let throttledMs = contention.throttledMs {
            let cpus = Self.cpus(limit.cpus)
            let bound = contention.throttledWallMs ?? 0
            let counts = "\(throttled) of \(periods) period\(periods == 1 ? "" : "s") throttled, up to \(ms(bound)) "
                + "of the \(ms(contention.windowMs)) watched (\(ms(throttledMs)) summed over CPUs)"
            out += report.stallClass == .throttled
                ? "  limit:    throttled: the container's CPU limit of \(cpus) was used up; \(counts)"
                : "  limit:    the container's CPU limit is \(cpus); \(counts)"
            out += " (cgroup \(limit.cgroup), \(limit.version), period \(ms(limit.periodMs)))\n"
        }
        var context: [String] = []
        if let pressure = contention.pressureSomePercent {
            context.append(String(format: "some thread waited for a CPU %.0f %% of the time", pressure)
                + " (\(contention.pressureScope ?? "host") pressure)")
        }
        if let steal = contention.stealMs, let window = contention.stealWindowMs {
            context.append("the hypervisor took \(ms(steal)) per CPU of \(ms(window)) (steal)")
        }
        if !context.isEmpty { out += "  cpu:      " + context.joined(separator: "; ") + "\n" }
        if let wait = contention.watchdogRunDelayMs, wait >= max(10, contention.windowMs / 10) {
            out += "  watchdog: waited \(ms(wait)) for a CPU itself"
                + (report.stallClass == .throttled ? " (the same limit)" : "")
                + ": fewer samples than sample_interval_ms asks for\n"
        }
        return out
    }

    /// `<trace id> span <span id>`, as a tracing UI's search takes the trace id; nil when not traced.
    private static func trace(_ traceId: String?, _ spanId: String?) -> String? {
        traceId.map { $0 + (spanId.map { " span \($0)" } ?? "") }
    }

    /// What the holder of the lock ran (its hottest stack, the service's own frames marked) and was blocked in.
    private static func holderLines(_ wait: StallReport.WaitingOn, _ report: StallReport) -> String {
        var out = ""
        if let stack = wait.holderStack, !stack.frames.isEmpty {
            let running = wait.holderTopFrame?.displayName ?? "its stack below"
            out += "  holder:   was running \(running) (\(stack.samples) of \(stack.of) of its samples):\n"
            out += frameLines(Array(stack.frames.prefix(12)), report, indent: "            ")
        }
        if let waiting = wait.holderWaiting { out += "  holder:   was itself blocked in \(waiting)\n" }
        return out
    }

    private static func frameLines(_ stack: [Int], _ report: StallReport, indent: String = "") -> String {
        var out = ""
        for (depth, index) in stack.enumerated() {
            guard report.frames.indices.contains(index) else { continue }
            let frame = report.frames[index]
            var name = frame.symbol ?? "???"
            if let offset = frame.symbolOffset { name += " + \(offset)" }
            if frame.inlined == true { name += " [inlined]" }
            if frame.async == true { name += " [async]" }
            var line = "\(frame.inApp ? ">" : " ") #\(depth) \(frame.address)  \(name)"
            if let location = StallReport.location(file: frame.file, line: frame.line) { line += "  at \(location)" }
            let module = frame.module.map { $0.split(separator: "/").last.map(String.init) ?? $0 } ?? "?"
            line += "  [\(module)\(frame.offset.map { "+" + $0 } ?? "")]"
            out += indent + line + "\n"
        }
        return out
    }
}
