import Foundation
@testable import Stallmon
@testable import StallmonReport
import StallmonTestSupport
import Testing

/// A C library compiled and loaded at test time, for the symbolication tests (inlined frames, line 0): real DWARF,
/// at known lines of `source`.
struct TestLibrary {
    let path: String
    let handle: UnsafeMutableRawPointer
    let source: String

    /// Compiles `source` as `name` (`lib<name>.so`) with `compiler` and `flags` (besides `-shared -fPIC -o`), and
    /// loads it.
    init(_ source: String, named name: String, compiler: String, flags: [String]) throws {
        let directory = makeTemporaryDirectory()
        let library = try CCompiler.build(source, named: name, in: directory, output: directory + "/lib\(name).so",
                                          flags: ["-shared", "-fPIC"] + flags, compiler: compiler)
        path = library
        handle = try #require(dlopen(library, RTLD_NOW))
        self.source = source
    }

    /// The address of `symbol`; fails the test when it is missing.
    func address(of symbol: String) throws -> UnsafeMutableRawPointer {
        try #require(dlsym(handle, symbol), "no \(symbol) in \(path)")
    }

    /// The line of `source` that ends with the comment `// marker`.
    func line(marked marker: String) -> Int? {
        source.split(separator: "\n", omittingEmptySubsequences: false).firstIndex { $0.hasSuffix("// \(marker)") }
            .map { $0 + 1 }
    }

    /// The report of one sample of `frames` (the interrupted address, then return addresses), as the monitor builds it.
    static func oneSampleReport(_ frames: [UInt], symbolicator: Symbolicator) -> StallReport {
        let snapshot = StallEvidence(
            id: "test-library", loopName: "main", threadID: 1, thresholdNanoseconds: 1, since: 0, sinceWall: 0,
            durationNanoseconds: 1, durationExact: true, ongoing: false, elapsedAtDetection: 0, labelID: 0,
            samples: [RawSample(capturedAt: 1, status: .ok, frames: frames, truncated: false, pauseNanoseconds: 1,
                                labelID: 0)])
        return ReportBuilder(symbolicator: symbolicator).build(snapshot)
    }

    /// `report` with its frames' symbols and lines dropped, then symbolicated again offline, from the files.
    static func symbolicatedAgainOffline(_ report: StallReport) -> StallReport {
        var stripped = report
        stripped.frames = report.frames.map { frame in
            var frame = frame
            frame.symbol = nil
            frame.line = nil
            return frame
        }
        return OfflineSymbolicator(debugDirectories: []).symbolicate(stripped).report
    }
}
