import Foundation

/// The code the documentation shows: every ```swift block of the README and of the DocC articles
/// (`Sources/<Target>/Documentation.docc/*.md`), README first, then the articles by path. Tests compile them as
/// written, so the documentation cannot drift from the API.
public enum DocumentedSnippets {
    public struct Snippet: Sendable {
        /// The file it is in, relative to the repository.
        public var file: String
        /// Its lines, without the fences.
        public var lines: [String]

        /// Its `import` lines.
        public var imports: [String] { lines.filter { $0.hasPrefix("import ") } }
        /// Everything but its `import` lines.
        public var body: [String] { lines.filter { !$0.hasPrefix("import ") } }
    }

    /// The README and every article, in the order snippets are numbered.
    public static func documents(repository: String) throws -> [String] {
        let sources = repository + "/Sources"
        var articles: [String] = []
        for target in try FileManager.default.contentsOfDirectory(atPath: sources).sorted() {
            let catalog = "Sources/\(target)/Documentation.docc"
            guard let files = try? FileManager.default.contentsOfDirectory(atPath: repository + "/" + catalog) else {
                continue
            }
            articles += files.filter { $0.hasSuffix(".md") }.sorted().map { "\(catalog)/\($0)" }
        }
        return ["README.md"] + articles
    }

    /// Every ```swift block of the documentation.
    public static func all(repository: String) throws -> [Snippet] {
        var snippets: [Snippet] = []
        for document in try documents(repository: repository) {
            let text = try String(contentsOfFile: repository + "/" + document, encoding: .utf8)
            var current: [String]?
            for line in text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
                if current == nil, line == "```swift" {
                    current = []
                } else if let lines = current, line == "```" {
                    snippets.append(Snippet(file: document, lines: lines))
                    current = nil
                } else if current != nil {
                    current!.append(line)
                }
            }
        }
        return snippets
    }

    /// What is wrong with the documentation's snippet that imports `module` (a middleware a real service of the tests
    /// compiles): it must be shown exactly once, and `compiledPath` (relative to the repository) must hold it line for
    /// line. Empty when both hold.
    public static func problems(ofSnippetImporting module: String, compiledIn compiledPath: String,
                                repository: String) throws -> [String] {
        let compiled = try String(contentsOfFile: repository + "/" + compiledPath, encoding: .utf8)
        let snippets = try all(repository: repository).filter { $0.lines.contains("import \(module)") }
        var problems = snippets.count == 1 ? [] : ["the documentation shows it \(snippets.count) times, not once"]
        for snippet in snippets where !compiled.contains(snippet.lines.joined(separator: "\n")) {
            problems.append("the snippet of \(snippet.file) differs from \(compiledPath)")
        }
        return problems
    }
}
