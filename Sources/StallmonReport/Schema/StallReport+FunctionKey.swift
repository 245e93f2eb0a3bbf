extension StallReport.Frame {
    /// The function a frame belongs to: its symbol, or module+offset when it has none. Addresses play no part,
    /// so the key is the same across runs and ASLR. Call trees, signatures and flame graphs merge frames by it.
    public var functionKey: String {
        symbol ?? "\(module.map { $0.split(separator: "/").last.map(String.init) ?? $0 } ?? "?")+\(offset ?? "?")"
    }
}
