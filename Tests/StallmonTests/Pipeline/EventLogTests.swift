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

    /// Only a durable append pays an fsync, on the log's own descriptor, after its line is in the file (the hang's
    /// `stall.hang` line, which the process may not outlive); ordinary lines never do.
    @Test func onlyADurableAppendIsSyncedAndAfterItsLine() throws {
        let directory = makeTemporaryDirectory()
        let path = directory + "/events.jsonl"
        final class Syncs {
            var sizesAtSync: [Int] = []
        }
        let syncs = Syncs()
        let log = EventLog(path: path, maxBytes: 1 << 20, maxFiles: 2) { fd in
            var info = stat()
            guard fstat(fd, &info) == 0 else { return -1 }
            syncs.sizesAtSync.append(Int(info.st_size))
            return fsync(fd)
        }
        func size() -> Int {
            var info = stat()
            return stat(path, &info) == 0 ? Int(info.st_size) : -1
        }
        try log.append(StallEvent(time: "2026-11-23T00:00:00.000Z", event: "stall.begin"))
        try log.append(StallEvent(time: "2026-11-23T00:00:01.000Z", event: "stall.interim"))
        #expect(syncs.sizesAtSync.isEmpty, "ordinary lines cost no fsync")
        try log.append(StallEvent(time: "2026-11-23T00:00:02.000Z", event: "stall.hang"), durable: true)
        #expect(syncs.sizesAtSync == [size()], "one fsync, with the hang's line already written")
        try log.append(StallEvent(time: "2026-11-23T00:00:03.000Z", event: "stall.end"))
        #expect(syncs.sizesAtSync.count == 1)
        let text = try String(contentsOfFile: path, encoding: .utf8)
        #expect(text.split(separator: "\n").count == 4)
    }
}
