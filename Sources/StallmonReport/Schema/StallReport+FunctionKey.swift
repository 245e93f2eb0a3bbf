extension StallReport.Frame {
    /// The function a frame belongs to: its symbol, or module+offset when it has none. Addresses play no part,
    /// so the key is the same across runs and ASLR. Call trees, signatures and flame graphs merge frames by it.
    public var functionKey: String {
        Self.functionKey(symbol: symbol, module: module, offset: offset)
    }

    /// `functionKey` of a frame with these members.
    package static func functionKey(symbol: String?, module: String?, offset: String?) -> String {
        symbol ?? "\(module.map { $0.split(separator: "/").last.map(String.init) ?? $0 } ?? "?")+\(offset ?? "?")"
    }
}

extension StallReport.Frame {
    /// `function` without the demangler's partial-function prefix ("(3) await resume partial function for ",
    /// "(2) suspend resume partial function for "): the function as written. Its number counts the function's
    /// suspension points, so it changes when an `await` is added elsewhere in the function.
    public static func withoutPartialFunctionPrefix(_ function: String) -> String {
        guard function.hasPrefix("(") else { return function }
        for marker in [" await resume partial function for ", " suspend resume partial function for "] {
            if let range = function.range(of: marker) { return String(function[range.upperBound...]) }
        }
        return function
    }
}
