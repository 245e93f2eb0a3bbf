import Foundation
import Testing

/// The README's StallmonNIO snippets compile as written: each is in ReadmeSnippets.swift (compiled with this target)
/// exactly as the README has it. The core-only package of PackageProductsTests compiles the other snippets.
struct ReadmeSnippetTests {
    @Test func everyStallmonNIOSnippetOfTheReadmeIsCompiledVerbatim() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
        let compiled = try String(contentsOf: root.appendingPathComponent("Tests/StallmonNIOTests/ReadmeSnippets.swift"),
                                  encoding: .utf8)
        var snippets: [[String]] = []
        var current: [String]?
        for line in readme.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
            if current == nil, line == "```swift" {
                current = []
            } else if let lines = current, line == "```" {
                if lines.contains("import StallmonNIO") { snippets.append(lines) }
                current = nil
            } else if current != nil {
                current!.append(line)
            }
        }
        #expect(snippets.count >= 2, "the README shows StallmonNIO")
        for (index, snippet) in snippets.enumerated() {
            let body = snippet.filter { !$0.hasPrefix("import ") }
            let function = (["func readmeNIOSnippet\(index)() throws {"] + body + ["}"]).joined(separator: "\n")
            #expect(compiled.contains(function), "README snippet \(index) differs from ReadmeSnippets.swift")
            for line in snippet where line.hasPrefix("import ") {
                #expect(compiled.contains("\n\(line)\n"), "ReadmeSnippets.swift lacks \(line)")
            }
        }
    }
}
