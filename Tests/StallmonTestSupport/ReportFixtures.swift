import Foundation
@testable import StallmonReport

/// A fresh directory under the system temporary directory, removed by `remove()`.
public struct TemporaryDirectory: Sendable {
    public let url: URL

    public init(_ label: String = "stallmon-clitests") throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("\(label)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    public var path: String { url.path }

    public func path(_ name: String) -> String { url.appendingPathComponent(name).path }

    /// Writes `contents` as the file `name` and returns its path.
    @discardableResult
    public func write(_ name: String, _ contents: Data) throws -> String {
        let path = path(name)
        try contents.write(to: URL(fileURLWithPath: path))
        return path
    }

    @discardableResult
    public func write(_ name: String, _ text: String) throws -> String {
        try write(name, Data(text.utf8))
    }

    public func remove() {
        try? FileManager.default.removeItem(at: url)
    }
}

/// Runs `body` with a fresh temporary directory that is removed afterwards.
public func withTemporaryDirectory<T>(_ body: (TemporaryDirectory) async throws -> T) async throws -> T {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    return try await body(directory)
}

/// Hand-made stall reports with known durations, top frames and loops.
public enum Fixture {
    public static let appModule = "/opt/app/bin/app"
    public static let libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
    public static let callerSymbol = "App.Server.handle(request:)"
    public static let leafSymbol = "__GI___nanosleep"

    /// A complete report. With a `topSymbol`, the most common stack is
    /// `[leaf in libc, topSymbol, App.Server.handle(request:), main]` (3 of 5 samples); without one, no frame is
    /// in-app and `topFrame` is nil.
    public static func report(id: String = UUID().uuidString.lowercased(), durationMs: Double, topSymbol: String?,
                       topFile: String? = "/src/App/Worker.swift", topLine: Int? = 42, loop: String = "main",
                       start: String = "2026-01-10T12:00:00.000Z", ongoing: Bool = false,
                       label: String = "timer.tick") -> StallReport
    {
        let inApp = topSymbol != nil
        let frames = [
            StallReport.Frame(address: "0x7f0000e5f2a0", image: 1, module: libc, buildId: "c0ffee", offset: "0xe5f2a0",
                              symbol: leafSymbol, symbolOffset: 26, file: nil, line: nil, inApp: false),
            StallReport.Frame(address: "0x55550000a123", image: 0, module: appModule, buildId: "abc123",
                              offset: "0xa123", symbol: topSymbol ?? "libfoo_do_work", symbolOffset: 83,
                              file: inApp ? topFile : nil, line: inApp ? topLine : nil, inApp: inApp),
            StallReport.Frame(address: "0x55550000b456", image: 0, module: appModule, buildId: "abc123",
                              offset: "0xb456", symbol: inApp ? callerSymbol : "libfoo_dispatch", symbolOffset: 12,
                              file: inApp ? "/src/App/Server.swift" : nil, line: inApp ? 17 : nil, inApp: inApp),
            StallReport.Frame(address: "0x55550000c789", image: 0, module: appModule, buildId: "abc123",
                              offset: "0xc789", symbol: "main", symbolOffset: 5, file: nil, line: nil, inApp: inApp),
        ]
        let common = [0, 1, 2, 3]
        let samples = [
            StallReport.Sample(offsetMs: 100, status: .ok, frames: [1, 2, 3], truncated: false, label: label),
            StallReport.Sample(offsetMs: 110, status: .ok, frames: common, truncated: false, label: label),
            StallReport.Sample(offsetMs: 120, status: .ok, frames: common, truncated: false, label: label),
            StallReport.Sample(offsetMs: 130, status: .timedOut, frames: [], truncated: false, label: label),
            StallReport.Sample(offsetMs: 140, status: .ok, frames: common, truncated: false, label: label),
        ]
        return StallReport(
            schema: StallReport.currentSchema, id: id, ongoing: ongoing,
            process: .init(pid: 4242, executable: appModule, buildId: "abc123", hostname: "testhost"),
            thread: .init(tid: 4243, name: "main-loop"), loop: loop, thresholdMs: 100,
            start: .init(wall: start, monotonicNs: 1_000_000_000), durationMs: durationMs,
            durationSource: ongoing ? "watchdog" : "loop", label: label,
            topFrame: topSymbol.map { .init(symbol: $0, module: appModule, file: topFile, line: topLine) },
            captures: .init(attempted: 5, succeeded: 4, timedOut: 1, pauseMedianUs: 35.5, pauseMaxUs: 80.25),
            samples: samples, frames: frames,
            images: [
                ImageInfo(path: appModule, buildId: "abc123", loadBias: "0x555500000000", start: "0x555500000000",
                          end: "0x555500100000"),
                ImageInfo(path: libc, buildId: "c0ffee", loadBias: "0x7f0000000000", start: "0x7f0000000000",
                          end: "0x7f0001000000"),
            ])
    }

    public static func encode(_ report: StallReport) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .withoutEscapingSlashes]
        return try encoder.encode(report)
    }

    /// Writes `report` as `stall-<name>.json` in `directory` and returns the path.
    @discardableResult
    public static func write(_ report: StallReport, named name: String, in directory: TemporaryDirectory) throws -> String {
        try directory.write("stall-\(name).json", encode(report))
    }

    /// ISO 8601 start time `offset` seconds after a fixed instant, so file order and start order agree.
    public static func start(_ offset: Int) -> String {
        String(format: "2026-01-10T12:%02d:%02d.000Z", offset / 60, offset % 60)
    }

    /// Nearest-rank percentile computed with integers, independent of the code under test.
    public static func nearestRank(_ values: [Double], percent: Int) -> Double {
        let sorted = values.sorted()
        let rank = max(1, (percent * sorted.count + 99) / 100)
        return sorted[rank - 1]
    }

    /// `ms()` of the CLI: "123.4 ms" below a second, "1.23 s" from one.
    public static func ms(_ value: Double) -> String {
        value >= 1000 ? String(format: "%.2f s", value / 1000) : String(format: "%.1f ms", value)
    }
}

/// JSON-lines event log content.
public enum EventFixture {
    public static func begin(_ index: Int, id: String, loop: String = "main") -> StallEvent {
        var event = StallEvent(time: Fixture.start(index), event: "stall.begin")
        event.id = id
        event.loop = loop
        event.tid = 4243
        event.thresholdMs = 100
        event.elapsedMs = 100.5
        event.label = "timer.tick"
        event.topFrame = "App.Worker.step\(index)()"
        return event
    }

    public static func end(_ index: Int, id: String, loop: String = "main", report: String) -> StallEvent {
        var event = StallEvent(time: Fixture.start(index), event: "stall.end")
        event.id = id
        event.loop = loop
        event.tid = 4243
        event.thresholdMs = 100
        event.durationMs = 150 + Double(index)
        event.label = "timer.tick"
        event.topFrame = "App.Worker.step\(index)() (Worker.swift:\(index))"
        event.samples = 7
        event.report = report
        return event
    }

    public static func line(_ event: StallEvent) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(event), as: UTF8.self)
    }
}

/// Appends `text` to the file at `path` with one write.
public func append(_ text: String, to path: String) throws {
    let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
    defer { try? handle.close() }
    try handle.seekToEnd()
    try handle.write(contentsOf: Data(text.utf8))
}

/// Stall reports with the fields of a grouped, classified stall set (`stallClass`, `signature`,
/// `suppressedBefore`), built on `Fixture.report`.
public enum GroupFixture {
    public static func report(id: String = UUID().uuidString.lowercased(), durationMs: Double, topSymbol: String?,
                       start: String = "2026-01-10T12:00:00.000Z", loop: String = "main",
                       stallClass: StallClass? = nil, signature: String? = nil,
                       suppressedBefore: Int? = nil) -> StallReport
    {
        var report = Fixture.report(id: id, durationMs: durationMs, topSymbol: topSymbol, loop: loop, start: start)
        report.stallClass = stallClass
        report.signature = signature
        report.suppressedBefore = suppressedBefore
        return report
    }

    /// ISO 8601 UTC with milliseconds, the form of `start.wall`.
    public static func iso(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        formatter.timeZone = TimeZone(identifier: "UTC")
        return formatter.string(from: date)
    }
}
