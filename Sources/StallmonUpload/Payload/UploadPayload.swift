import Foundation
import Stallmon
import StallmonReport

enum UploadPayload {
    static func encode(_ reports: [StallReport], format: UploadFormat, serviceName: String?,
                       observedAt: UInt64) throws -> [UInt8] {
        switch format {
        case .ndjson:
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.withoutEscapingSlashes]
            var body: [UInt8] = []
            for report in reports {
                body += try encoder.encode(report)
                body.append(UInt8(ascii: "\n"))
            }
            return body
        case .otlp:
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.withoutEscapingSlashes]
            return Array(try encoder.encode(OTLP.request(for: reports, serviceName: serviceName,
                                                         observedAt: observedAt)))
        }
    }
}

/// The OTLP ExportLogsServiceRequest in its JSON mapping: lowerCamelCase keys, 64-bit integers as strings, enums as
/// numbers, absent fields omitted.
enum OTLP {
    struct ExportLogsServiceRequest: Encodable {
        var resourceLogs: [ResourceLogs]
    }

    struct ResourceLogs: Encodable {
        var resource: Resource
        var scopeLogs: [ScopeLogs]
    }

    struct Resource: Encodable {
        var attributes: [KeyValue]
    }

    struct ScopeLogs: Encodable {
        var scope: Scope
        var logRecords: [LogRecord]
    }

    struct Scope: Encodable {
        var name: String
        var version: String
    }

    struct LogRecord: Encodable {
        var timeUnixNano: String
        var observedTimeUnixNano: String
        var severityNumber: Int
        var severityText: String
        var body: AnyValue
        var attributes: [KeyValue]
        /// The request's trace, when the stalled task's `StallLabel` scope was traced: hex, as OTLP's JSON mapping
        /// writes trace and span ids (not base64, unlike other bytes fields).
        var traceId: String?
        var spanId: String?
    }

    struct KeyValue: Encodable {
        var key: String
        var value: AnyValue
    }

    struct AnyValue: Encodable {
        var stringValue: String?
        var boolValue: Bool?
        var intValue: String?
        var doubleValue: Double?

        static func string(_ value: String) -> AnyValue { AnyValue(stringValue: value) }
        static func bool(_ value: Bool) -> AnyValue { AnyValue(boolValue: value) }
        static func int(_ value: Int) -> AnyValue { AnyValue(intValue: String(value)) }
        static func double(_ value: Double) -> AnyValue { AnyValue(doubleValue: value) }
    }

    static let severityWarn = 13
    static let scope = Scope(name: "stallmon", version: "0.1.0")

    static func request(for reports: [StallReport], serviceName: String?, observedAt: UInt64)
        -> ExportLogsServiceRequest
    {
        struct ProcessKey: Hashable {
            var pid: Int32
            var hostname: String
            var executable: String
        }
        var order: [ProcessKey] = []
        var groups: [ProcessKey: [StallReport]] = [:]
        for report in reports {
            let key = ProcessKey(pid: report.process.pid, hostname: report.process.hostname,
                                 executable: report.process.executable)
            if groups[key] == nil { order.append(key) }
            groups[key, default: []].append(report)
        }
        return ExportLogsServiceRequest(resourceLogs: order.map { key in
            let members = groups[key]!
            let process = members[0].process
            let executableName = process.executable.split(separator: "/").last.map(String.init) ?? process.executable
            var attributes: [KeyValue] = [
                KeyValue(key: "service.name", value: .string(serviceName ?? executableName)),
                KeyValue(key: "host.name", value: .string(process.hostname)),
                KeyValue(key: "process.pid", value: .int(Int(process.pid))),
                KeyValue(key: "process.executable.name", value: .string(executableName)),
                KeyValue(key: "process.executable.path", value: .string(process.executable)),
            ]
            if let buildId = process.buildId {
                attributes.append(KeyValue(key: "process.executable.build_id.gnu", value: .string(buildId)))
            }
            return ResourceLogs(resource: Resource(attributes: attributes),
                                scopeLogs: [ScopeLogs(scope: scope, logRecords: members.map {
                                    logRecord(for: $0, observedAt: observedAt)
                                })])
        })
    }

    static func logRecord(for report: StallReport, observedAt: UInt64) -> LogRecord {
        let top = report.topFrame?.displayName ?? StallSummary.noInAppFrame
        let attributes = stallAttributes(report, top: top) + waitAttributes(report) + jobAttributes(report)
            + starvationAttributes(report) + threadAttributes(report)
        // Before 1970 or past UInt64 nanoseconds (year 2554): not a time OTLP can carry; the observation's time then.
        let start = WallTime.unixNanoseconds(report.start.wall)
        let body = report.starvation.map { starvation in
            "pool \"\(report.loop)\" starved \(String(format: "%.1f", starvation.saturatedMs)) ms, the oldest job waited "
                + "\(String(format: "%.1f", starvation.oldestWaitMs)) ms" + (report.ongoing ? " (ongoing)" : "")
                + "; held by \(top)"
        } ?? "loop \"\(report.loop)\" stalled \(String(format: "%.1f", report.durationMs)) ms"
            + (report.ongoing ? " (ongoing)" : "") + " in \(top)"
        return LogRecord(timeUnixNano: String(start ?? observedAt), observedTimeUnixNano: String(observedAt),
                         severityNumber: severityWarn, severityText: "WARN", body: .string(body),
                         attributes: attributes, traceId: report.traceId, spanId: report.spanId)
    }

    // MARK: - A log record's attributes, by concern

    /// The stall itself: what, where, how long, its stack and signature.
    private static func stallAttributes(_ report: StallReport, top: String) -> [KeyValue] {
        var attributes: [KeyValue] = [
            KeyValue(key: "event.name", value: .string("stallmon.stall")),
            KeyValue(key: "stallmon.report.id", value: .string(report.id)),
            KeyValue(key: "stallmon.loop", value: .string(report.loop)),
            KeyValue(key: "stallmon.stall.duration_ms", value: .double(report.durationMs)),
            KeyValue(key: "stallmon.stall.threshold_ms", value: .double(report.thresholdMs)),
            KeyValue(key: "stallmon.stall.ongoing", value: .bool(report.ongoing)),
            KeyValue(key: "stallmon.stall.top_frame", value: .string(top)),
            KeyValue(key: "stallmon.stall.samples", value: .int(report.samples.count)),
            KeyValue(key: "thread.id", value: .int(Int(report.thread.tid))),
            KeyValue(key: "thread.name", value: .string(report.thread.name)),
        ]
        if !report.label.isEmpty {
            attributes.append(KeyValue(key: "stallmon.label", value: .string(report.label)))
        }
        if let frame = report.topFrame {
            attributes.append(KeyValue(key: "code.function.name", value: .string(frame.symbol)))
            if let file = frame.file { attributes.append(KeyValue(key: "code.file.path", value: .string(file))) }
            if let line = frame.line { attributes.append(KeyValue(key: "code.line.number", value: .int(line))) }
        }
        // What the report and `stallmon show` lead with: the hottest stack, so a collector groups as `report` does.
        let stack = StackText.hottestStack(report)
        if !stack.isEmpty { attributes.append(KeyValue(key: "stallmon.stall.stack", value: .string(stack))) }
        if let signature = report.signature {
            attributes.append(KeyValue(key: "stallmon.stall.signature", value: .string(signature)))
        }
        if let stallClass = report.stallClass {
            attributes.append(KeyValue(key: "stallmon.stall.class", value: .string(stallClass.rawValue)))
        }
        return attributes
    }

    /// What the thread waited on most, and the lock's holder.
    private static func waitAttributes(_ report: StallReport) -> [KeyValue] {
        guard let wait = report.waitingOn?.first else { return [] }
        var attributes = [KeyValue(key: "stallmon.wait.kind", value: .string(wait.kind)),
                          KeyValue(key: "stallmon.wait.syscall", value: .string(wait.syscall))]
        if let target = wait.target {
            attributes.append(KeyValue(key: "stallmon.wait.target", value: .string(target)))
        }
        guard let holder = wait.holderThread else { return attributes }
        attributes.append(KeyValue(key: "stallmon.wait.holder.thread", value: .int(Int(holder))))
        if let name = wait.holderName {
            attributes.append(KeyValue(key: "stallmon.wait.holder.thread_name", value: .string(name)))
        }
        if let top = wait.holderTopFrame {
            attributes.append(KeyValue(key: "stallmon.wait.holder.function", value: .string(top.symbol)))
        }
        let holderStack = StackText.holderStack(report)
        if !holderStack.isEmpty {
            attributes.append(KeyValue(key: "stallmon.wait.holder.stack", value: .string(holderStack)))
        }
        if let waiting = wait.holderWaiting {
            attributes.append(KeyValue(key: "stallmon.wait.holder.waiting", value: .string(waiting)))
        }
        return attributes
    }

    /// The async job that stalled: executor, priority, task.
    private static func jobAttributes(_ report: StallReport) -> [KeyValue] {
        guard let job = report.job else { return [] }
        var attributes = [KeyValue(key: "stallmon.job.executor", value: .string(job.executor)),
                          KeyValue(key: "stallmon.job.priority", value: .string(job.priority)),
                          KeyValue(key: "stallmon.job.kind", value: .string(job.kind))]
        if let taskId = job.taskId {
            attributes.append(KeyValue(key: "stallmon.job.task_id", value: .string(String(taskId))))
        }
        if let name = job.taskName { attributes.append(KeyValue(key: "stallmon.job.task_name", value: .string(name))) }
        return attributes
    }

    /// A starvation of the pool: how long, how many waited, and one line per culprit.
    private static func starvationAttributes(_ report: StallReport) -> [KeyValue] {
        guard let starvation = report.starvation else { return [] }
        var attributes = [
            KeyValue(key: "stallmon.kind", value: .string(report.kind ?? "starvation")),
            KeyValue(key: "stallmon.starvation.verdict", value: .string(starvation.verdict)),
            KeyValue(key: "stallmon.starvation.saturated_ms", value: .double(starvation.saturatedMs)),
            KeyValue(key: "stallmon.starvation.oldest_wait_ms", value: .double(starvation.oldestWaitMs)),
        ]
        if let waited = starvation.waitedJobs {
            attributes.append(KeyValue(key: "stallmon.starvation.waited_jobs", value: .int(waited)))
        }
        if let run = starvation.jobsRun {
            attributes.append(KeyValue(key: "stallmon.starvation.jobs_run", value: .int(run)))
        }
        attributes.append(KeyValue(key: "stallmon.starvation.workers", value: .int(starvation.workers)))
        // One line per culprit: its worker, task, function, class and how long it held the worker.
        let culprits = starvation.culprits.map { culprit in
            "thread \(culprit.thread.tid)"
                + (culprit.job?.taskName.map { " task \"\($0)\"" } ?? culprit.job?.taskId.map { " task \($0)" } ?? "")
                + (culprit.label.map { " [\($0)]" } ?? "")
                + ": \(culprit.topFrame?.displayName ?? "(no stack)")"
                + " (\(culprit.stallClass?.rawValue ?? "unknown"), busy \(String(format: "%.1f", culprit.busyMs)) ms"
                + (culprit.heldThroughout ? ", held throughout)" : ")")
        }
        attributes.append(KeyValue(key: "stallmon.starvation.culprits", value: .string(culprits.joined(separator: "\n"))))
        return attributes
    }

    /// Where the stalled thread's time went.
    private static func threadAttributes(_ report: StallReport) -> [KeyValue] {
        guard let figures = report.threadStats else { return [] }
        return [KeyValue(key: "stallmon.thread.cpu_ms", value: .double(figures.cpuMs)),
                KeyValue(key: "stallmon.thread.run_delay_ms", value: .double(figures.runDelayMs)),
                KeyValue(key: "stallmon.thread.sleep_ms", value: .double(figures.sleepMs))]
            + contentionAttributes(report)
    }

    /// The CPU limit and its throttling within the stall, pressure and steal.
    private static func contentionAttributes(_ report: StallReport) -> [KeyValue] {
        guard let contention = report.cpuContention else { return [] }
        var attributes: [KeyValue] = []
        if let limit = contention.limit {
            attributes.append(KeyValue(key: "stallmon.cpu.limit_cpus", value: .double(limit.cpus)))
            attributes.append(KeyValue(key: "stallmon.cpu.cgroup", value: .string(limit.cgroup)))
        }
        if let periods = contention.periods {
            attributes.append(KeyValue(key: "stallmon.cpu.periods", value: .int(periods)))
        }
        if let throttled = contention.throttledPeriods {
            attributes.append(KeyValue(key: "stallmon.cpu.throttled_periods", value: .int(throttled)))
        }
        if let throttledMs = contention.throttledMs {
            attributes.append(KeyValue(key: "stallmon.cpu.throttled_ms", value: .double(throttledMs)))
        }
        if let pressure = contention.pressureSomePercent {
            attributes.append(KeyValue(key: "stallmon.cpu.pressure_some_percent", value: .double(pressure)))
        }
        if let steal = contention.stealMs {
            attributes.append(KeyValue(key: "stallmon.cpu.steal_ms", value: .double(steal)))
        }
        return attributes
    }
}
