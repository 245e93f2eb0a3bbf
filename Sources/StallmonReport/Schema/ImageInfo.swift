/// A loaded ELF image as reports record it, so addresses can be symbolicated again offline.
public struct ImageInfo: Codable, Hashable, Sendable {
    public var path: String
    public var buildId: String?
    /// dl_iterate_phdr's load bias, hex: address = loadBias + ELF virtual address.
    public var loadBias: String
    /// Lowest and one-past-highest mapped address, hex.
    public var start: String
    public var end: String

    package init(path: String, buildId: String? = nil, loadBias: String, start: String, end: String) {
        self.path = path
        self.buildId = buildId
        self.loadBias = loadBias
        self.start = start
        self.end = end
    }
}
