import CStallmonSymbols
import Foundation
import StallmonReport

/// Re-symbolicates a report away from the process that wrote it, from the report's image list: each image is found
/// by build id in the debug directories (`DIR/.build-id/xx/yyyy.debug`, the layout of Debian's -dbgsym packages and
/// `objcopy --only-keep-debug`), then at its recorded path if its build id matches, then in /usr/lib/debug. Frames
/// whose image cannot be found keep what they had. NOT thread-safe.
package struct OfflineSymbolicator {
    package let debugDirectories: [String]

    package init(debugDirectories: [String]) {
        self.debugDirectories = debugDirectories
    }

    /// What happened to each image.
    package struct Outcome: Sendable {
        package var report: StallReport
        /// Image path → file used, or nil when none was found.
        package var sources: [String: String?]
    }

    package func symbolicate(_ report: StallReport) -> Outcome {
        var report = report
        var sources: [String: String?] = [:]
        var usable: [Int: OpaquePointer] = [:]
        defer { usable.values.forEach { cstallmon_symbolizer_destroy($0) } }
        for (index, image) in report.images.enumerated() where report.frames.contains(where: { $0.image == index }) {
            guard let bias = UInt(image.loadBias.dropFirst(2), radix: 16) else { continue }
            var chosen: String?
            // A frame of this image to probe with: a candidate only counts if it names it (a stripped file keeps
            // its build id but has no symbol table).
            let probes = report.frames.filter { $0.image == index }.prefix(8)
                .compactMap { $0.offset.flatMap { UInt($0.dropFirst(2), radix: 16) } }
            for candidate in candidates(for: image) where FileManager.default.fileExists(atPath: candidate) {
                guard let symbolizer = cstallmon_symbolizer_create_offline(nil) else { break }
                var named = false
                if cstallmon_symbolizer_add_module(symbolizer, candidate, bias) == 0 {
                    named = probes.contains { probe in
                        var symbol = cstallmon_symbol()
                        // A report's numbers are outside input: an address past the end of memory names nothing.
                        let (address, overflow) = bias.addingReportingOverflow(probe)
                        return !overflow && cstallmon_symbolize(symbolizer, address, &symbol) == 1
                            && symbol.symbol != nil
                    }
                }
                if named {
                    usable[index] = symbolizer
                    chosen = candidate
                    break
                }
                cstallmon_symbolizer_destroy(symbolizer)
            }
            sources[image.path] = chosen
        }
        // Physical frames are symbolicated again; the inlined frames in front of each are dropped and found anew,
        // so the samples' frame indices are rebuilt.
        var frames: [StallReport.Frame] = []
        var expansion: [Int: [Int]] = [:]
        for (position, frame) in report.frames.enumerated() where frame.inlined != true {
            var physical = frame
            var calls: [InlinedCall] = []
            if let image = frame.image, let symbolizer = usable[image],
               let bias = UInt(report.images[image].loadBias.dropFirst(2), radix: 16),
               let offsetText = frame.offset, let offset = UInt(offsetText.dropFirst(2), radix: 16),
               case (let address, false) = bias.addingReportingOverflow(offset) {
                var symbol = cstallmon_symbol()
                if cstallmon_symbolize(symbolizer, address, &symbol) == 1 {
                    if let raw = symbol.symbol {
                        physical.symbol = Symbolicator.demangle(String(cString: raw))
                        physical.symbolOffset = Int(clamping: symbol.symbol_offset)
                    }
                    calls = InlinedCall.read(symbol)
                    if let file = symbol.source_file, symbol.line > 0 {
                        physical.file = String(cString: file)
                        physical.line = Int(symbol.line)
                    } else if !calls.isEmpty {
                        physical.file = nil
                        physical.line = nil
                    }
                    // The in-app rules the writer used are not in the report, so `inApp` stands, but names and
                    // files found only now may show the frame is stallmon's own C code: never the service's.
                    if Symbolicator.isStallmonCCode(symbol: physical.symbol, file: physical.file) {
                        physical.inApp = false
                    }
                }
            }
            let logical = StallReport.Frame.expanding(physical, inlined: calls, executable: report.process.executable)
            expansion[position] = Array(frames.count..<(frames.count + logical.count))
            frames += logical
        }
        report.frames = frames
        for position in report.samples.indices {
            report.samples[position].frames = report.samples[position].frames.flatMap { expansion[$0] ?? [] }
        }
        let analysis = StallAggregation.analyze(frames: report.frames, samples: report.samples)
        report.callTree = analysis.tree
        report.hottestStack = analysis.hottest
        report.topFrame = analysis.topFrame ?? report.topFrame
        report.signature = analysis.signature
        return Outcome(report: report, sources: sources)
    }

    /// Where to look for an image's symbols, best first.
    func candidates(for image: ImageInfo) -> [String] {
        var paths: [String] = []
        if let buildId = image.buildId, buildId.count > 2 {
            let relative = ".build-id/\(buildId.prefix(2))/\(buildId.dropFirst(2)).debug"
            paths += debugDirectories.map { ($0.hasSuffix("/") ? $0 : $0 + "/") + relative }
        }
        if !image.path.isEmpty && image.path.hasPrefix("/") && buildIdMatches(path: image.path, expected: image.buildId) {
            paths.append(image.path)
        }
        if let buildId = image.buildId, buildId.count > 2 {
            paths.append("/usr/lib/debug/.build-id/\(buildId.prefix(2))/\(buildId.dropFirst(2)).debug")
        }
        return paths
    }

    /// True when the file at `path` carries `expected` as its GNU build id (or no id is recorded to compare).
    private func buildIdMatches(path: String, expected: String?) -> Bool {
        guard let expected else { return true }
        guard let data = FileManager.default.contents(atPath: path) else { return false }
        // The note is near the start of the file; compare raw bytes rather than parse the ELF.
        var needle: [UInt8] = []
        var digits = expected[...]
        while digits.count >= 2, let byte = UInt8(digits.prefix(2), radix: 16) {
            needle.append(byte)
            digits = digits.dropFirst(2)
        }
        guard !needle.isEmpty else { return false }
        return data.prefix(1 << 20).range(of: Data(needle)) != nil
    }
}
