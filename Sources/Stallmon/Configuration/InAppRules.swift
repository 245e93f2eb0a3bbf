/// Which frames are the service's own code ("in-app", marked `>` by `stallmon show`): they pick the top frame and
/// the signature. Decided per frame, first rule that applies:
/// 1. stallmon's own code (its Swift modules; its C code by the `cstallmon_` prefix and by source file, under one of
///    its C targets' `Sources/` folders: no rule below brings it back), compiler glue (thunks, `partial apply`,
///    witness tables, value witnesses, `outlined copy of`, metadata accessors) and Swift runtime helpers the compiler
///    emits into every binary (`__swift_…`, `swift_…`): no;
/// 2. code of the toolchain's Swift modules (the standard library, `_Concurrency`, Foundation,
///    `FoundationEssentials`, Dispatch, …), by the module in the symbol's name wherever it was linked from (also
///    `--static-swift-stdlib` builds, and code inlined or specialized into the binary), and C++ library code: no;
/// 3. a Swift module named in `include` (key `in_app_include`): yes; named in `exclude` (`in_app_exclude`): no;
/// 4. a module of a widely used package (`Symbolicator.wellKnownDependencyModules`: SwiftNIO, swift-log,
///    ArgumentParser, Hummingbird, Vapor, …): no;
/// 5. code whose DWARF source file lies in a package checkout (any `/checkouts/` directory): a dependency, not the
///    service: no; code DWARF calls `<compiler-generated>` (synthesized `$main`, conformances): no;
/// 6. otherwise, by image: the executable and libraries outside the system directories: yes.
public struct InAppRules: Sendable, Hashable {
    /// Swift module names whose code is always in-app (e.g. a dependency you consider your own).
    public var include: [String]
    /// Swift module names whose code is never in-app (e.g. a framework built from your own sources).
    public var exclude: [String]

    public init(include: [String] = [], exclude: [String] = []) {
        self.include = include
        self.exclude = exclude
    }

    /// Parses `A, B, C` (module names; empty for none).
    static func parseModules(_ text: String, key: String) throws(ConfigurationError) -> [String] {
        let names = text.split(separator: ",").map { String($0).trimmingWhitespace() }.filter { !$0.isEmpty }
        for name in names where !name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" }) {
            throw .invalid(key: key, value: name, reason: "expected Swift module names separated by commas")
        }
        return names
    }
}
