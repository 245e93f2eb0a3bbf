import Foundation
import StallmonTestSupport
import Testing

/// The documentation's StallmonNIO snippets compile as written: each snippet of the README or an article that imports
/// StallmonNIO is in ReadmeSnippets.swift (compiled with this target) exactly as the documentation has it. The
/// core-only package of PackageProductsTests compiles the other snippets.
struct ReadmeSnippetTests {
    @Test func everyStallmonNIOSnippetOfTheDocumentationIsCompiledVerbatim() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().path
        let compiled = try String(contentsOfFile: root + "/Tests/StallmonNIOTests/ReadmeSnippets.swift", encoding: .utf8)
        let snippets = try DocumentedSnippets.all(repository: root).filter { $0.lines.contains("import StallmonNIO") }
        #expect(snippets.contains { $0.file == "README.md" }, "the README shows StallmonNIO")
        #expect(snippets.count >= 2, "the README and the NIO article show StallmonNIO")
        for (index, snippet) in snippets.enumerated() {
            let function = (["func readmeNIOSnippet\(index)() throws {"] + snippet.body + ["}"]).joined(separator: "\n")
            #expect(compiled.contains(function), "snippet \(index) of \(snippet.file) differs from ReadmeSnippets.swift")
            for line in snippet.imports {
                #expect(compiled.contains("\n\(line)\n"), "ReadmeSnippets.swift lacks \(line)")
            }
        }
    }
}
