import StallmonReport

/// What the report writer's thread keeps between messages: the event logs, the report builders, the report files,
/// the sinks' delivery and the rate limit. Writer-thread-only.
struct WriterState {
    /// One writer per event-log file.
    var eventLogs: [String: EventLog] = [:]
    /// One report builder (and symbolicator) per set of in-app rules; almost always exactly one.
    var builders: [InAppRules: ReportBuilder] = [:]
    /// Reports handed to the sinks, and those a sink refused until it takes them.
    var delivery = SinkDelivery()
    var files: ReportFiles
    /// The rate limit, asked once per stall.
    var admission = StallAdmission()

    /// What was kept for stall `id` until its final report, which will not come (refused by a full queue).
    mutating func forget(stall id: String) {
        files.paths[id] = nil
        admission.forget(id)
    }

    mutating func reportBuilder(for rules: InAppRules) -> ReportBuilder {
        if let builder = builders[rules] { return builder }
        let made = ReportBuilder(symbolicator: Symbolicator(inAppRules: rules))
        builders[rules] = made
        return made
    }

    mutating func eventLog(for configuration: StallMonitorConfiguration) -> EventLog {
        let path = configuration.reports.resolvedEventLogPath
        if let log = eventLogs[path] { return log }
        let made = EventLog(path: path, maxBytes: configuration.reports.eventLogMaxBytes,
                            maxFiles: configuration.reports.eventLogMaxFiles)
        eventLogs[path] = made
        return made
    }
}
