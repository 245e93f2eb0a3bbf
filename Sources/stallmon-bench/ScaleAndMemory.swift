import Foundation
import Logging
import Stallmon
import StallmonReport
import StallmonUpload
import StallmonLoop

/// A real report from a real stall in this process: the template for the scale figures.
func makeTemplateReport(scratch: String, logger: Logger) throws -> [UInt8] {
    let directory = scratch + "/template"
    let loop = try Looper(name: "template")
    let monitor = try LooperStallMonitor(loop: loop, configuration: .init(
        detection: .init(threshold: .milliseconds(50)), reports: .init(directory: directory)), logger: logger)
    monitor.start()
    loop.perform(label: "template") { _ = benchSpin(milliseconds: 120) }
    loop.run(for: .milliseconds(400))
    monitor.stop()
    guard let first = try ReportReader.scan(directory: directory).reports.first else {
        throw BenchError("no template report was written")
    }
    return Array(try Data(contentsOf: URL(fileURLWithPath: first.path)))
}

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Writes `count` copies of `template` with distinct ids and start times (no fsync: test data). The id and start
/// time are spliced in at offsets found once, so 100,000 copies take seconds rather than minutes.
func writeCopies(of template: [UInt8], count: Int, into directory: String) throws {
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    let report = try ReportReader.decode(Data(template), path: "template")
    // Every occurrence of the id and of the start time, in order, as (offset, length, which).
    var marks: [(offset: Int, length: Int, isID: Bool)] = []
    for (needle, isID) in [(Array(report.id.utf8), true), (Array(report.start.wall.utf8), false)] {
        var index = 0
        while index + needle.count <= template.count {
            if template[index] == needle[0] && Array(template[index..<index + needle.count]) == needle {
                marks.append((index, needle.count, isID))
                index += needle.count
            } else {
                index += 1
            }
        }
    }
    marks.sort { $0.offset < $1.offset }
    for index in 0..<count {
        let id = Array(String(format: "%08x-0000-4000-8000-%012x", index, index).utf8)  // same length as a UUID
        let wall = Array(String(format: "2026-10-%02dT%02d:%02d:%02d.000Z", 1 + (index / 86_400) % 28,
                                (index / 3600) % 24, (index / 60) % 60, index % 60).utf8)
        var copy: [UInt8] = []
        copy.reserveCapacity(template.count)
        var cursor = 0
        for mark in marks {
            copy += template[cursor..<mark.offset]
            copy += mark.isID ? id : wall
            cursor = mark.offset + mark.length
        }
        copy += template[cursor...]
        let name = "\(directory)/stall-\(String(format: "%07d", index))-\(String(decoding: id.prefix(8), as: UTF8.self)).json"
        _ = FileManager.default.createFile(atPath: name, contents: Data(copy))
    }
}

// MARK: - 4. Reports and CLI scale

struct ReportScale {
    let quick: Bool
    let scratch: String
    let stallmon: String
    let logger: Logger
    let counts: [Int]

    func run(_ results: Results) throws {
        print("\n4. Reports and CLI scale")
        let template = try makeTemplateReport(scratch: scratch, logger: logger)
        results.add(Figure(section: "reports", name: "size of a typical report", value: Double(template.count) / 1024,
                           unit: "KiB", note: "one 120 ms stall, 12 samples, with its image list"))
        // Durable writes: temp file, fsync, rename, fsync the directory.
        let writes = quick ? 100 : 500
        let directory = scratch + "/writes"
        try AtomicFile.createDirectory(directory)
        let start = nowNanoseconds()
        for index in 0..<writes { try AtomicFile.write(template, to: "\(directory)/stall-\(index).json") }
        let perSecond = Double(writes) / (Double(nowNanoseconds() - start) / 1e9)
        results.add(Figure(section: "reports", name: "atomic durable report writes", value: perSecond, unit: "/s"))

        guard FileManager.default.isExecutableFile(atPath: stallmon) else {
            print("  (skipping `stallmon report` scale: \(stallmon) not found)")
            return
        }
        var previous: (count: Int, seconds: Double)?
        for count in (quick ? counts.filter { $0 <= 10_000 } : counts) {
            let reports = scratch + "/scale-\(count)"
            try writeCopies(of: template, count: count, into: reports)
            let timing = try timeCommand([stallmon, "report", reports, "--format", "json"])
            results.add(Figure(section: "reports", name: "stallmon report over \(count) reports", value: timing.seconds,
                               unit: "s", target: count == 100_000 ? "≤ 3 s" : nil,
                               note: "peak RSS \(String(format: "%.0f", timing.peakMiB)) MiB, exit \(timing.status)"))
            results.add(Figure(section: "reports", name: "  peak RSS over \(count) reports", value: timing.peakMiB,
                               unit: "MiB"))
            if let previous {
                let growth = (timing.seconds / previous.seconds) / (Double(count) / Double(previous.count))
                results.add(Figure(section: "reports", name: "  time growth vs linear (\(previous.count)→\(count))",
                                   value: growth, unit: "×", note: "1.0 = linear"))
            }
            previous = (count, timing.seconds)
            // The fleet outputs of the same selection (issue 44): a pprof profile and a Perfetto timeline.
            for (option, name) in [("--pprof", "report --pprof"), ("--timeline", "report --timeline")] {
                let output = scratch + "/scale-output"
                let export = try timeCommand([stallmon, "report", reports, "--format", "json", option, output])
                results.add(Figure(section: "reports", name: "stallmon \(name) over \(count) reports",
                                   value: export.seconds, unit: "s", target: count == 100_000 ? "≤ 5 s" : nil,
                                   note: "peak RSS \(String(format: "%.0f", export.peakMiB)) MiB, exit \(export.status)"))
                try? FileManager.default.removeItem(atPath: output)
            }
            try? FileManager.default.removeItem(atPath: reports)
        }
    }
}

// MARK: - 5. Upload

struct UploadThroughput {
    let quick: Bool
    let scratch: String
    let receiver: String
    let logger: Logger

    func run(_ results: Results) throws {
        print("\n5. Upload to a local collector (127.0.0.1)")
        #if !Upload
        print("  (skipping: built without the Upload trait)")
        #else
        guard FileManager.default.fileExists(atPath: receiver) else {
            print("  (skipping: \(receiver) not found)")
            return
        }
        let count = quick ? 2_000 : 10_000
        let template = try makeTemplateReport(scratch: scratch, logger: logger)
        let directory = scratch + "/upload"
        try writeCopies(of: template, count: count, into: directory)
        let spool = Spool(reportDirectory: directory)
        for name in try FileManager.default.contentsOfDirectory(atPath: directory) where name.hasPrefix("stall-") {
            try spool.enqueue(reportPath: directory + "/" + name)
        }
        let portFile = scratch + "/port"
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", receiver, "--port-file", portFile, "--log", scratch + "/requests.jsonl",
                             "--lifetime", "300", "--no-parse"]
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        for _ in 0..<500 where !FileManager.default.fileExists(atPath: portFile) { usleep(10_000) }
        guard let port = try? String(contentsOfFile: portFile, encoding: .utf8) else { throw BenchError("no receiver") }
        var configuration = UploadConfiguration()
        configuration.endpoint = "http://127.0.0.1:\(port)"
        let uploader = try Uploader(spool: spool, configuration: configuration, logger: logger)
        let start = nowNanoseconds()
        let statistics = uploader.flush(deadline: .seconds(300))
        let seconds = Double(nowNanoseconds() - start) / 1e9
        results.add(Figure(section: "upload", name: "\(count) reports delivered (OTLP, gzip, batches of 100)",
                           value: seconds, unit: "s", target: count == 10_000 ? "≤ 3 s" : nil,
                           note: "delivered \(statistics.delivered), pending \(statistics.pending)"))
        results.add(Figure(section: "upload", name: "upload throughput", value: Double(statistics.delivered) / seconds,
                           unit: "/s"))
        // Idle: the background thread with an empty spool.
        uploader.start()
        let before = processCPUSeconds()
        let idleStart = nowNanoseconds()
        sleep(quick ? 2 : 5)
        let cpu = processCPUSeconds() - before
        let wall = Double(nowNanoseconds() - idleStart) / 1e9
        uploader.stop(deadline: .seconds(1))
        results.add(Figure(section: "upload", name: "uploader CPU while idle (whole process)", value: cpu / wall * 100,
                           unit: "%", target: "≈ 0"))
        #endif
    }
}

// MARK: - 6. Memory

struct MemoryFootprint {
    let scratch: String
    let logger: Logger

    func run(_ results: Results) throws {
        print("\n6. Memory: resident set added by a running monitor")
        let loop = try Looper(name: "memory")
        let before = residentBytes()
        let monitor = try LooperStallMonitor(loop: loop, configuration: .init(
            detection: .init(threshold: .milliseconds(50)), reports: .init(directory: scratch + "/memory")),
                                             logger: logger)
        monitor.start()
        loop.run(for: .milliseconds(500))
        let idle = residentBytes()
        loop.perform { _ = benchSpin(milliseconds: 120) }
        loop.run(for: .milliseconds(800))
        let afterReport = residentBytes()
        monitor.stop()
        results.add(Figure(section: "memory", name: "RSS added by a started monitor (threads, buffers)",
                           value: (idle - before) / 1_048_576, unit: "MiB", target: "≤ 4 MiB"))
        results.add(Figure(section: "memory", name: "RSS added after its first report (symbolicator loaded)",
                           value: (afterReport - before) / 1_048_576, unit: "MiB",
                           note: "libdw maps the symbol tables and DWARF of the images it looks into"))
    }
}
