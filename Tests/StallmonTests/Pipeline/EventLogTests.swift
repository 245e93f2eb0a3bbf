import Foundation
@testable import Stallmon
import StallmonReport
import StallmonTestSupport
import Testing

struct EventLogTests {
    /// Eight writers, each with its own descriptor as separate processes have (`flock` locks belong to the open
    /// file, so two opens in one process exclude each other exactly as two processes do), append to one small log
    /// that rotates every few lines. Every line must arrive whole, exactly once, in some file of the rotation.
    @Test func eightWritersThroughRotationLoseAndCutNoLine() throws {
        let directory = makeTemporaryDirectory()
        let path = directory + "/events.jsonl"
        let writers = 8
        let linesEach = 400
        DispatchQueue.concurrentPerform(iterations: writers) { writer in
            let log = EventLog(path: path, maxBytes: 4096, maxFiles: 10_000)
            for index in 0..<linesEach {
                var event = StallEvent(time: "2026-11-23T00:00:00.000Z", event: "test")
                event.loop = "writer-\(writer)"
                event.count = index
                try? log.append(event)
            }
        }
        let files = try FileManager.default.contentsOfDirectory(atPath: directory).filter { $0.hasPrefix("events") }
        #expect(files.count > 50, "the log rotated (\(files.count) files)")
        var seen: [String: Set<Int>] = [:]
        var total = 0
        for file in files {
            let data = try #require(FileManager.default.contents(atPath: directory + "/" + file))
            #expect(data.last == UInt8(ascii: "\n"), "\(file) ends with a whole line")
            for line in data.split(separator: UInt8(ascii: "\n")) {
                let event = try JSONDecoder().decode(StallEvent.self, from: Data(line))
                seen[event.loop ?? "", default: []].insert(event.count ?? -1)
                total += 1
            }
            #expect(data.count <= 4096 || data.split(separator: UInt8(ascii: "\n")).count == 1)
        }
        #expect(total == writers * linesEach)
        for writer in 0..<writers { #expect(seen["writer-\(writer)"]?.count == linesEach) }
    }
}
