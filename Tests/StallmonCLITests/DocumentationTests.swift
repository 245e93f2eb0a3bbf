import Foundation
import StallmonTestSupport
import Testing

/// The README stays a contract (at most 250 lines of at most 200 characters) and every file it links to exists;
/// the articles it points to are built with warnings as errors by scripts/docs.sh.
struct DocumentationTests {
    static let readme = PackageProductsTests.repository + "/README.md"

    @Test func theReadmeIsShort() throws {
        let lines = try String(contentsOfFile: Self.readme, encoding: .utf8).split(separator: "\n",
                                                                                    omittingEmptySubsequences: false)
        #expect(lines.count <= 251, "README: \(lines.count) lines")  // the last is empty after the final newline
        for (number, line) in lines.enumerated() where line.count > 200 {
            Issue.record("README line \(number + 1) has \(line.count) characters")
        }
    }

    @Test func everyFileTheReadmeLinksToExists() throws {
        let text = try String(contentsOfFile: Self.readme, encoding: .utf8)
        let links = text.matches(of: /\]\(([^)#\s]+)(#[^)]*)?\)/).map { String($0.output.1) }
            .filter { !$0.contains("://") }
        #expect(links.count >= 10, "the README links its articles: \(links)")
        for link in links {
            #expect(FileManager.default.fileExists(atPath: PackageProductsTests.repository + "/" + link),
                    "README links to \(link), which does not exist")
        }
    }

    @Test func everyCatalogHasItsRootPageAndEveryArticleIsListed() throws {
        let repository = PackageProductsTests.repository
        let articles = try DocumentedSnippets.documents(repository: repository).filter { $0 != "README.md" }
        let catalogs = Set(articles.map { ($0 as NSString).deletingLastPathComponent })
        #expect(catalogs.count >= 2, "\(catalogs)")
        for catalog in catalogs {
            let target = (((catalog as NSString).deletingLastPathComponent) as NSString).lastPathComponent
            let root = try String(contentsOfFile: "\(repository)/\(catalog)/\(target).md", encoding: .utf8)
            #expect(root.hasPrefix("# ``\(target)``"), "\(catalog): the root page is titled with its module")
            for article in articles where article.hasPrefix(catalog + "/") {
                let name = ((article as NSString).lastPathComponent as NSString).deletingPathExtension
                guard name != target else { continue }
                #expect(root.contains("<doc:\(name)>"), "\(target).md does not list \(name)")
            }
        }
    }
}
