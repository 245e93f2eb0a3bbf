#if canImport(Glibc)
import Glibc
#endif
import CStallmonCapture
import CStallmonSymbols
import StallmonReport
import Synchronization

/// What the symbolicator knows of one address.
struct SymbolizedAddress: Sendable {
    var imageIndex: Int?
    var module: String?
    var buildId: String?
    var moduleOffset: UInt?
    var rawSymbol: String?
    var symbol: String?
    var symbolOffset: UInt?
    var file: String?
    var line: Int?
    var inApp: Bool
    /// Functions the compiler inlined at the address, innermost first; `file`/`line` is then the call site of the
    /// outermost one in `symbol`.
    var inlined: [InlinedCall] = []
}

/// A function inlined at an address, from DWARF, with its name demangled.
struct InlinedCall: Sendable, Equatable {
    var symbol: String?
    var file: String?
    var line: Int?

    /// The inlined functions libdw found for one lookup, innermost first.
    static func read(_ symbol: cstallmon_symbol) -> [InlinedCall] {
        guard let inlined = symbol.inlined, symbol.inlined_count > 0 else { return [] }
        return UnsafeBufferPointer(start: inlined, count: Int(symbol.inlined_count)).map { frame in
            InlinedCall(symbol: frame.function.map { Symbolicator.demangle(String(cString: $0)) },
                        file: frame.source_file.map { String(cString: $0) },
                        line: frame.line > 0 ? Int(frame.line) : nil)
        }
    }
}

extension StallReport.Frame {
    /// The frames one address stands for: the functions inlined there, innermost first and marked `inlined`, then
    /// `physical` itself. Inlined frames share the address, module and offset of the physical one.
    static func expanding(_ physical: StallReport.Frame, inlined calls: [InlinedCall],
                          executable: String, rules: InAppRules = InAppRules()) -> [StallReport.Frame] {
        calls.map { call in
            var frame = physical
            frame.symbol = call.symbol
            frame.symbolOffset = nil
            frame.file = call.file
            frame.line = call.line
            frame.inlined = true
            frame.inApp = Symbolicator.isInApp(module: physical.module, symbol: call.symbol, file: call.file,
                                               executable: executable, rules: rules)
            return frame
        } + [physical]
    }
}

/// Turns addresses of this process into module, symbol (demangled) and file:line, with libdw. Runs on the report
/// writer thread and in the CLI only: never in the signal handler, never on the loop thread. Caches per address,
/// so a 500-sample report symbolicates each distinct address once. Not thread-safe.
final class Symbolicator {
    private var symbolizer: OpaquePointer?
    private var cache: [UInt: SymbolizedAddress] = [:]
    private(set) var images: [ImageInfo] = []
    /// /proc/self/exe: frames in it are in-app.
    let executablePath: String
    private var ranges: [(start: UInt, end: UInt, bias: UInt, index: Int)] = []

    /// What counts as the service's own code.
    let inAppRules: InAppRules

    init(inAppRules: InAppRules = InAppRules()) {
        self.inAppRules = inAppRules
        symbolizer = cstallmon_symbolizer_create_for_process(getpid(), nil)
        executablePath = Symbolicator.resolveExecutable()
        refreshImages()
    }

    deinit {
        if let symbolizer { cstallmon_symbolizer_destroy(symbolizer) }
    }

    /// Re-reads the image list and the module maps (after dlopen, or when an address maps to no known image).
    func refreshImages() {
        final class Collector {
            var images: [ImageInfo] = []
            var ranges: [(start: UInt, end: UInt, bias: UInt, index: Int)] = []
        }
        let collector = Collector()
        withExtendedLifetime(collector) {
            cstallmon_for_each_image({ image, context in
                guard let image, let context else { return }
                let collector = Unmanaged<Collector>.fromOpaque(context).takeUnretainedValue()
                let info = image.pointee
                var buildId: String?
                if let bytes = info.build_id, info.build_id_size > 0 {
                    buildId = UnsafeBufferPointer(start: bytes, count: Int(info.build_id_size)).hexString
                }
                let path = info.path.map { String(cString: $0) } ?? ""
                collector.ranges.append((UInt(info.start), UInt(info.end), UInt(info.load_bias),
                                         collector.images.count))
                collector.images.append(ImageInfo(path: path, buildId: buildId, loadBias: hex(UInt(info.load_bias)),
                                                  start: hex(UInt(info.start)), end: hex(UInt(info.end))))
            }, Unmanaged.passUnretained(collector).toOpaque())
        }
        images = collector.images
        ranges = collector.ranges.sorted { $0.start < $1.start }
        if let symbolizer { _ = cstallmon_symbolizer_refresh(symbolizer) }
    }

    /// The address looked up for a frame: a return address (every frame but the first) minus one, so that the call
    /// site, not the next line, is named; `symbolOffset` is counted from it.
    static func lookupAddress(_ address: UInt, isReturnAddress: Bool) -> UInt {
        isReturnAddress && address > 0 ? address - 1 : address
    }

    /// Symbolicates `address`; `isReturnAddress` (every frame but the first) looks up `address - 1` so the call
    /// site, not the next line, is named.
    func symbolize(_ address: UInt, isReturnAddress: Bool) -> SymbolizedAddress {
        let lookup = Self.lookupAddress(address, isReturnAddress: isReturnAddress)
        if let cached = cache[lookup] { return cached }
        var image = imageContaining(lookup)
        if image == nil {
            refreshImages()
            image = imageContaining(lookup)
        }
        var result = SymbolizedAddress(inApp: false)
        if let image {
            let info = images[image.index]
            result.imageIndex = image.index
            result.module = info.path
            result.buildId = info.buildId
            result.moduleOffset = lookup - image.bias
        }
        var symbol = cstallmon_symbol()
        if let symbolizer, cstallmon_symbolize(symbolizer, lookup, &symbol) == 1 {
            if result.module == nil, let path = symbol.module_path { result.module = String(cString: path) }
            if let raw = symbol.symbol {
                let rawName = String(cString: raw)
                result.rawSymbol = rawName
                result.symbol = Symbolicator.demangle(rawName)
                result.symbolOffset = UInt(symbol.symbol_offset)
            }
            if let file = symbol.source_file {
                result.file = String(cString: file)
                result.line = symbol.line > 0 ? Int(symbol.line) : nil  // line 0: compiler-generated, file known
            }
            result.inlined = InlinedCall.read(symbol)
        }
        result.inApp = Symbolicator.isInApp(module: result.module, symbol: result.symbol, file: result.file,
                                            executable: executablePath, rules: inAppRules)
        cache[lookup] = result
        return result
    }

    private func imageContaining(_ address: UInt) -> (bias: UInt, index: Int)? {
        var low = 0
        var high = ranges.count
        while low < high {
            let mid = (low + high) / 2
            if ranges[mid].start <= address { low = mid + 1 } else { high = mid }
        }
        guard low > 0 else { return nil }
        let candidate = ranges[low - 1]
        return address < candidate.end ? (candidate.bias, candidate.index) : nil
    }

    /// Demangles Swift (with the runtime's demangler) and C++ names; others are returned unchanged.
    static func demangle(_ name: String) -> String {
        var buffer = [CChar](repeating: 0, count: 4096)
        if cstallmon_demangle_swift(name, &buffer, buffer.count) == 1 || cstallmon_demangle_cxx(name, &buffer, buffer.count) == 1 {
            return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
        return name
    }

    /// In-app frames are the user's code: not the C library, the Swift runtime, Foundation, Dispatch, libunwind,
    /// nor stallmon's own loop, monitor and C code (`isStallmonCCode`, first: no rule re-includes it); nor standard
    /// library code the compiler inlined or specialized into the user's binary.
    /// The rules of `InAppRules`' documentation, in that order.
    static func isInApp(module: String?, symbol: String?, file: String? = nil, executable: String,
                        rules: InAppRules = InAppRules()) -> Bool {
        if isStallmonCCode(symbol: symbol, file: file) { return false }
        if let symbol {
            if ownPrefixes.contains(where: { symbol.hasPrefix($0) }) { return false }
            // `merged X`: functions of identical code the optimizer folded into one.
            let unmerged = symbol.hasPrefix("merged ") ? symbol.dropFirst("merged ".count) : Substring(symbol)
            if compilerEmittedPrefixes.contains(where: { unmerged.hasPrefix($0) }) { return false }
            if symbol.contains("value witness for ") { return false }  // destroy, initializeWithCopy, …
            if systemSymbolPrefixes.contains(where: { symbol.hasPrefix($0) }) { return false }
            if systemSymbolPrefixes.contains(where: { symbol.contains(" of \($0)") }) { return false }  // specializations
            if ownModules.contains(where: { symbol.contains(" in \($0).") }) { return false }  // our closures
            if let swiftModule = swiftModule(of: symbol) {
                // By the code's Swift module wherever it was linked from: with --static-swift-stdlib the toolchain's
                // Foundation and runtime, and every package dependency, are in the executable itself.
                if toolchainModules.contains(swiftModule) || ownModules.contains(swiftModule) { return false }
                if rules.include.contains(swiftModule) { return true }
                if rules.exclude.contains(swiftModule) { return false }
                if isWellKnownDependency(swiftModule) { return false }
            }
        }
        if let file, isInPackageCheckout(file) { return false }
        if file == "<compiler-generated>" { return false }  // synthesized code: $main, conformances, thunks
        guard let module else { return false }
        if module == executable { return true }
        let name = module.split(separator: "/").last.map(String.init) ?? module
        if systemLibraryPrefixes.contains(where: { name.hasPrefix($0) }) { return false }
        if systemDirectories.contains(where: { module.hasPrefix($0) }) { return false }
        return true
    }

    /// The Swift module a demangled name belongs to: `static App.Server.handle()` → App, `closure #1 in
    /// App.run()` → App, `(extension in ArgumentParser):ArgumentParser.ParsableCommand.main()` → ArgumentParser.
    /// Nil for C and C++ names.
    static func swiftModule(of symbol: String) -> String? {
        var rest = Substring(symbol)
        let prefixes = ["static ", "merged ", "async function pointer to ", "implicit closure #", "closure #",
                        "$defer #", "(extension in "]
        // `generic specialization <…> of X`, `function signature specialization <…> of X`: X's module.
        let specializations = ["generic specialization <", "function signature specialization <",
                               "specialized generic specialization <"]
        var changed = true
        while changed {
            changed = false
            for prefix in specializations where rest.hasPrefix(prefix) {
                guard let of = endOfSpecialization(rest.dropFirst(prefix.count)) else { return nil }
                rest = of
                changed = true
            }
            for prefix in prefixes where rest.hasPrefix(prefix) {
                rest = rest.dropFirst(prefix.count)
                if prefix.hasSuffix("#") {
                    // `closure #1 (SIGNATURE) in CONTEXT`: the signature may name types `(X in _HASH)` of its own.
                    guard let context = contextAfterClosure(rest) else { return nil }
                    rest = context
                } else if prefix == "(extension in " {
                    return rest.split(separator: ")").first.map(String.init)
                }
                changed = true
            }
        }
        let name = rest.prefix { $0.isLetter || $0.isNumber || $0 == "_" }
        guard !name.isEmpty, rest.dropFirst(name.count).first == "." else { return nil }
        return String(name)
    }

    /// After a specialization's opening `<`: what follows its matching `>` and ` of `, or nil.
    private static func endOfSpecialization(_ text: Substring) -> Substring? {
        var depth = 1
        var index = text.startIndex
        var previous: Character = " "
        while index < text.endIndex {
            let character = text[index]
            if character == "<" { depth += 1 }
            if character == ">" && previous != "-" { depth -= 1 }  // not the arrow of a function type
            previous = character
            index = text.index(after: index)
            if depth == 0 {
                let after = text[index...]
                return after.hasPrefix(" of ") ? after.dropFirst(4) : nil
            }
        }
        return nil
    }

    /// What follows the first ` in ` outside parentheses (the context of a closure), or nil.
    private static func contextAfterClosure(_ text: Substring) -> Substring? {
        var depth = 0
        var index = text.startIndex
        while index < text.endIndex {
            switch text[index] {
            case "(": depth += 1
            case ")": depth -= 1
            case " " where depth == 0 && text[index...].hasPrefix(" in "):
                return text[text.index(index, offsetBy: 4)...]
            default: break
            }
            index = text.index(after: index)
        }
        return nil
    }

    /// Swift modules of the toolchain: never the service's code, also when linked into its executable
    /// (`--static-swift-stdlib`) or inlined there.
    static let toolchainModules: Set<String> = [
        "Swift", "_Concurrency", "_StringProcessing", "RegexBuilder", "Synchronization", "Observation",
        "Distributed", "_Differentiation", "Cxx", "CxxStdlib", "Foundation", "FoundationEssentials",
        "FoundationInternationalization", "FoundationNetworking", "FoundationXML", "_FoundationCollections",
        "Dispatch", "Glibc", "SwiftGlibc", "Musl", "XCTest", "Testing", "_Testing_Foundation",
    ]

    /// Swift modules of widely used packages (SwiftNIO, swift-log, swift-metrics, ArgumentParser, async-http-client,
    /// Hummingbird, Vapor, gRPC, swift-crypto, …): a dependency's code, not the service's, wherever the checkout was
    /// (`--build-path` elsewhere, sources gone, DWARF stripped). A module named in `in_app_include` overrides this.
    static func isWellKnownDependency(_ module: String) -> Bool {
        if wellKnownDependencyModules.contains(module) { return true }
        return wellKnownDependencyPrefixes.contains { module.hasPrefix($0) }
    }

    static let wellKnownDependencyModules: Set<String> = [
        "Logging", "Metrics", "CoreMetrics", "ArgumentParser", "ArgumentParserToolInfo", "AsyncHTTPClient",
        "ServiceLifecycle", "UnixSignals", "Crypto", "_CryptoExtras", "CryptoBoringWrapper", "SwiftProtobuf",
        "AsyncAlgorithms", "Atomics", "Collections", "DequeModule", "OrderedCollections", "HeapModule",
        "BitCollections", "HashTreeCollections", "Algorithms", "Numerics", "RealModule", "HTTPTypes",
        "HTTPTypesFoundation", "Tracing", "Instrumentation", "ServiceContextModule", "SwiftASN1", "X509",
        "SystemPackage", "OpenAPIRuntime", "OpenAPIAsyncHTTPClient", "OpenAPIHummingbird", "OpenAPIVapor",
        "RoutingKit", "ConsoleKit", "ConsoleKitTerminal", "ConsoleKitCommands", "AsyncKit", "MultipartKit",
        "WebSocketKit", "PostgresNIO", "PostgresKit", "SQLKit", "SQLiteNIO", "SQLiteKit", "MySQLNIO", "MySQLKit",
        "Fluent", "FluentKit", "FluentPostgresDriver", "FluentSQLiteDriver", "Leaf", "LeafKit", "JWT", "JWTKit",
        "Vapor", "XCTVapor", "VaporTesting", "Prometheus", "W3CTraceContext", "CompressNIO", "Mustache", "Yams",
        "GRDB", "SwiftSyntax", "Subprocess",
        // SwiftNIO and its siblings
        "NIO", "NIOCore", "NIOPosix", "NIOEmbedded", "NIOConcurrencyHelpers", "NIOFoundationCompat", "NIOHTTP1",
        "NIOHTTP2", "NIOWebSocket", "NIOTLS", "NIOSSL", "NIOExtras", "NIOHTTPCompression", "NIOSOCKS", "NIOSSH",
        "NIOTransportServices", "NIOFileSystem", "NIOTestUtils", "NIOResumableUpload", "NIOCertificateReloading",
        "NIOHTTPTypes", "NIOHTTPTypesHTTP1", "NIOHTTPTypesHTTP2", "NIOAsyncRuntime",
        // Hummingbird 2
        "Hummingbird", "HummingbirdCore", "HummingbirdRouter", "HummingbirdHTTP2", "HummingbirdTLS",
        "HummingbirdTesting", "HummingbirdAuth", "HummingbirdBasicAuth", "HummingbirdBcrypt", "HummingbirdOTP",
        "HummingbirdWebSocket", "HummingbirdWSCore", "HummingbirdWSClient", "HummingbirdWSCompression",
        "HummingbirdCompression", "HummingbirdRedis", "HummingbirdFluent", "HummingbirdLambda", "Mustache",
        "WSCore", "WSClient", "WSCompression",
        // gRPC Swift 1 and 2
        "GRPC", "GRPCCore", "GRPCCodeGen", "GRPCNIOTransportCore", "GRPCNIOTransportHTTP2",
        "GRPCNIOTransportHTTP2Posix", "GRPCNIOTransportHTTP2TransportServices", "GRPCProtobuf", "GRPCInProcessTransport",
        "GRPCHealthService", "GRPCReflectionService", "GRPCServiceLifecycle", "GRPCOTelTracingInterceptors",
        // swift-otel
        "OTel", "OTelCore", "OTelAPI", "OTelSDK", "OTLPCore", "OTLPGRPC", "OTLPHTTP", "OTelSemanticConventions",
    ]
    /// Module families by prefix: only names no service module is likely to take (underscored and C modules).
    static let wellKnownDependencyPrefixes = ["_NIO", "CNIO", "_Crypto", "CGRPC", "_Hummingbird"]

    static let ownModules = ["StallmonLoop", "Stallmon", "StallmonReport", "StallmonUpload", "StallmonNIO"]

    // MARK: - stallmon's own C code

    /// Whether a frame is stallmon's own C code (issue 32, item 5), wherever the package was checked out (a path
    /// dependency, a SwiftPM checkout, this repository) and however it was linked (SwiftPM links it statically into
    /// the executable, where the image cannot tell it from the service's code). By the frame's DWARF source file
    /// when it has one: a file under `Sources/<one of stallmon's C targets>/` (`ownCTargets`). By name: every
    /// function stallmon exports is `cstallmon_…`; without a source file (no DWARF), also the few it defines without
    /// the prefix that run on a monitored thread (`ownUnprefixedCFunctions`). A file elsewhere (a service's own
    /// `hook.c`, its own `epoll_wait` interposer) is not stallmon's.
    static func isStallmonCCode(symbol: String?, file: String?) -> Bool {
        if let symbol, symbol.hasPrefix(ownCPrefix) { return true }
        if let file { return isInStallmonCTarget(file) }
        guard let symbol else { return false }
        // `name.cold`, `name.llvm.123`: parts of the function the compiler split off or renamed.
        return ownUnprefixedCFunctions.contains { symbol == $0 || symbol.hasPrefix($0 + ".") }
    }

    /// Whether `file` (a DWARF source path: absolute, or relative to the package root when the build mapped the
    /// prefix away) lies in one of stallmon's C targets. Exact target directories only: SwiftPM refuses two targets
    /// of one name in a package graph, so no other package's target lives in `Sources/CStallmonNIOHook/`, while a
    /// service's `Sources/CStallmonExtras/` or `Sources/AppHooks/hook.c` is the service's.
    static func isInStallmonCTarget(_ file: String) -> Bool {
        ownCTargets.contains { target in
            file.hasPrefix("Sources/\(target)/") || file.contains("/Sources/\(target)/")
        }
    }

    /// The prefix of every C function stallmon exports.
    static let ownCPrefix = "cstallmon_"
    /// stallmon's C targets (Package.swift): their sources and headers are stallmon's, never the service's.
    static let ownCTargets = ["CStallmonCapture", "CStallmonConcurrency", "CStallmonNIOHook", "CStallmonLoopShims",
                              "CStallmonSymbols", "CStallmonCLI"]
    /// Functions stallmon's C code defines without the `cstallmon_` prefix that a sample of a monitored thread can
    /// catch: only StallmonNIO's interposed `epoll_wait` (CStallmonNIOHook/hook.c; it must carry libc's name; in a
    /// non-system image that name is stallmon's hook or a statically linked libc's, not the service's work). Every
    /// other function of stallmon's C code is prefixed, its static ones included, but for the global executor's
    /// `run_timed` and `run_job`, which are always inlined, so only DWARF, which names the file, shows them. Used only
    /// for frames without a DWARF source file, which decides otherwise.
    static let ownUnprefixedCFunctions = ["epoll_wait"]

    /// Stallmon's own code and compiler glue, which is never where the user's work is.
    static let ownPrefixes = ["StallmonLoop.", "Stallmon.", "StallmonReport.", "StallmonUpload.", "StallmonNIO.",
                              "(extension in Stallmon)", "(extension in StallmonLoop)", "(extension in StallmonReport)",
                              "(extension in StallmonNIO)", "cstallmon_", "partial apply for ",
                              "partial apply forwarder for ", "reabstraction thunk", "thunk for ",
                              "protocol witness for ", "_start", "__libc_start"]
    /// Code the compiler emits into every Swift binary: runtime entry points and helpers, value witnesses,
    /// metadata accessors, outlined copies.
    static let compilerEmittedPrefixes = ["__swift_", "swift_", "_swift_", "outlined ", "value witness for ",
                                          "type metadata ", "lazy protocol witness table ", "metaclass for ",
                                          "nominal type descriptor for ", "protocol conformance descriptor for ",
                                          "associated type metadata accessor"]
    /// Where SwiftPM (`.build/checkouts/`) and Xcode (`SourcePackages/checkouts/`) check dependencies out: code from
    /// there is a package's, not the service's.
    static let checkoutDirectories = ["/.build/checkouts/", "/SourcePackages/checkouts/"]

    /// Other `…/checkouts/` directories are SwiftPM's only when their parent is a SwiftPM build directory
    /// (`--build-path`, `--scratch-path`): it holds `workspace-state.json`. Checked once per directory.
    private static let scratchDirectories = Mutex<[String: Bool]>([:])

    /// Whether `file` (a DWARF source path) lies in a package checkout.
    static func isInPackageCheckout(_ file: String) -> Bool {
        if checkoutDirectories.contains(where: { file.contains($0) }) { return true }
        guard let range = file.range(of: "/checkouts/") else { return false }
        let parent = String(file[..<range.lowerBound])
        return scratchDirectories.withLock { known in
            if let answer = known[parent] { return answer }
            let answer = access(parent + "/workspace-state.json", F_OK) == 0
            if known.count < 1024 { known[parent] = answer }
            return answer
        }
    }
    /// Modules of the Swift toolchain and C++ library whose code can land in the user's binary (inlined, or
    /// specialized as `generic specialization <…> of Swift.…`).
    static let systemSymbolPrefixes = ["Swift.", "(extension in Swift)", "_Concurrency.", "Foundation.",
                                       "FoundationEssentials.", "Dispatch.", "Synchronization.", "Glibc.", "std::",
                                       "__gnu_cxx::"]
    static let systemLibraryPrefixes = ["libc.so", "libc-", "libm.so", "libpthread", "ld-linux", "linux-vdso",
                                        "libswift", "libFoundation", "lib_Foundation", "libdispatch",
                                        "libBlocksRuntime", "libstdc++", "libgcc_s", "libunwind", "libdw", "libelf",
                                        "libXCTest", "libTesting"]
    static let systemDirectories = ["/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/", "/opt/swift/"]

    private static func resolveExecutable() -> String {
        var buffer = [CChar](repeating: 0, count: 4096)
        let length = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard length > 0 else { return "" }
        return String(decoding: buffer.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

func hex(_ value: UInt) -> String {
    "0x" + String(value, radix: 16)
}

extension UnsafeBufferPointer where Element == UInt8 {
    var hexString: String {
        var text = ""
        text.reserveCapacity(count * 2)
        for byte in self {
            let digits = String(byte, radix: 16)
            if digits.count == 1 { text += "0" }
            text += digits
        }
        return text
    }
}
