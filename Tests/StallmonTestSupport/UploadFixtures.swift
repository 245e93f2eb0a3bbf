import Foundation
import Stallmon
import StallmonReport
import StallmonUpload

/// A plausible report with a fresh id, written into `directory` and spooled.
@discardableResult
public func spoolSampleReports(_ count: Int, into directory: String, durationMs: Double = 150) throws -> [String] {
    let spool = Spool(reportDirectory: directory)
    var ids: [String] = []
    for index in 0..<count {
        let report = sampleReport(durationMs: durationMs + Double(index))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted]
        let path = "\(directory)/stall-2026112\(String(format: "%05d", index))-\(report.id.prefix(8)).json"
        try AtomicFile.write(Array(try encoder.encode(report)), to: path)
        try spool.enqueue(reportPath: path)
        ids.append(report.id)
    }
    return ids
}

public func sampleReport(durationMs: Double, id: String = UUID().uuidString.lowercased()) -> StallReport {
    StallReport(
        schema: StallReport.currentSchema, id: id, ongoing: false,
        process: .init(pid: 4242, executable: "/usr/bin/myservice", buildId: "abcdef0123", hostname: "host-a"),
        thread: .init(tid: 4243, name: "main"), loop: "main", thresholdMs: 100,
        start: .init(wall: "2026-11-22T01:02:03.456Z", monotonicNs: 123_456_789),
        durationMs: durationMs, durationSource: "loop", label: "request",
        topFrame: .init(symbol: "MyService.handle(request:)", module: "/usr/bin/myservice", file: "/src/Handler.swift",
                        line: 42),
        captures: .init(attempted: 2, succeeded: 2, timedOut: 0, pauseMedianUs: 20, pauseMaxUs: 30),
        samples: [.init(offsetMs: 100, status: .ok, frames: [0, 1], truncated: false, label: "request"),
                  .init(offsetMs: 110, status: .ok, frames: [0, 1], truncated: false, label: "request")],
        frames: [.init(address: "0x1000", image: 0, module: "/usr/bin/myservice", buildId: "abcdef0123",
                       offset: "0x1000", symbol: "MyService.handle(request:)", symbolOffset: 16,
                       file: "/src/Handler.swift", line: 42, inApp: true),
                 .init(address: "0x2000", image: 0, module: "/usr/bin/myservice", buildId: "abcdef0123",
                       offset: "0x1fff", symbol: "main", symbolOffset: 8, file: nil, line: nil, inApp: true)],
        images: [.init(path: "/usr/bin/myservice", buildId: "abcdef0123", loadBias: "0x0", start: "0x0",
                       end: "0x10000")])
}

/// A fast-retrying upload configuration against `endpoint`.
public func testUploadConfiguration(_ endpoint: String, format: UploadFormat = .otlp) -> UploadConfiguration {
    var configuration = UploadConfiguration()
    configuration.endpoint = endpoint
    configuration.format = format
    configuration.batchMaxReports = 10
    configuration.batchMaxAge = .zero
    configuration.requestTimeout = .seconds(2)
    configuration.backoffBase = .milliseconds(50)
    configuration.backoffMax = .milliseconds(200)
    configuration.token = "s3cret-token"
    configuration.headers = [.init(name: "X-Tenant", value: "team-a")]
    return configuration
}
