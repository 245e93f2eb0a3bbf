import Foundation

/// C code the tests compile at run time (a seccomp launcher, an LD_PRELOAD counter, libraries with known DWARF): the
/// one way to do it, with the compiler's output in the error when it fails.
public enum CCompiler {
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// Writes `source` to `directory/<name>.c` and compiles it to `output` with `flags` (before `-o`), its log in
    /// `directory/cc-<name>.log`, with `compiler` (nil: the system's cc, gcc or clang). Returns `output`. Throws when
    /// no compiler is installed (scripts/test.sh installs gcc) or the compilation fails.
    @discardableResult
    public static func build(_ source: String, named name: String, in directory: String, output: String,
                             flags: [String], compiler given: String? = nil) throws -> String {
        guard let compiler = given ?? findTool("cc", "gcc", "clang") else {
            throw Failure(description: "no C compiler (scripts/test.sh installs gcc)")
        }
        let sourcePath = directory + "/\(name).c"
        let log = directory + "/cc-\(name).log"
        try source.write(toFile: sourcePath, atomically: true, encoding: .utf8)
        let status = ChildProcess.run(compiler, flags + ["-o", output, sourcePath], timeout: .seconds(60),
                                      outputPath: log)
        guard status == 0 else {
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            throw Failure(description: "cc failed (\(String(describing: status))): \(text)")
        }
        return output
    }
}
