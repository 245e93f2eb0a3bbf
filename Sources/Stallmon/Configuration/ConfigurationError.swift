extension String {
    package func trimmingWhitespace() -> String {
        var slice = Substring(self)
        while let first = slice.first, first.isWhitespace { slice.removeFirst() }
        while let last = slice.last, last.isWhitespace { slice.removeLast() }
        return String(slice)
    }
}

/// A configuration value, file or environment variable stallmon cannot use. The message names the key, the value
/// and, for files, the line.
public struct ConfigurationError: Error, Equatable, CustomStringConvertible, Sendable {
    public let description: String

    public init(_ description: String) {
        self.description = description
    }

    static func invalid(key: String, value: String, reason: String) -> ConfigurationError {
        ConfigurationError("invalid \(key) = \(value): \(reason)")
    }
}
