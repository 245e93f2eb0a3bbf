/// Why a monitor could not be created.
public struct StallMonitorError: Error, CustomStringConvertible, Sendable {
    public let description: String

    package init(description: String) {
        self.description = description
    }
}
