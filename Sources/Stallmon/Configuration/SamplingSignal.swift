import CStallmonCapture

/// The real-time signal stallmon samples with, written `SIGRTMIN+N` (or a plain number in SIGRTMIN…SIGRTMAX).
public struct SamplingSignal: Sendable, Equatable, CustomStringConvertible {
    /// Offset from SIGRTMIN; the signal number is resolved at run time because glibc reserves the first few.
    public var offsetFromRTMin: Int

    public init(offsetFromRTMin: Int) {
        self.offsetFromRTMin = offsetFromRTMin
    }

    /// SIGRTMIN+3.
    public static let `default` = SamplingSignal(offsetFromRTMin: 3)

    /// Parses `SIGRTMIN+N`, `SIGRTMIN`, or a signal number in the real-time range.
    public init(parsing text: String) throws(ConfigurationError) {
        let trimmed = text.trimmingWhitespace().uppercased()
        if trimmed == "SIGRTMIN" {
            self.init(offsetFromRTMin: 0)
        } else if trimmed.hasPrefix("SIGRTMIN+"), let offset = Int(trimmed.dropFirst("SIGRTMIN+".count)), offset >= 0 {
            self.init(offsetFromRTMin: offset)
        } else if let number = Int(trimmed), (0...1024).contains(number) {
            self.init(offsetFromRTMin: number - Int(cstallmon_sigrtmin()))
        } else {
            throw .invalid(key: "signal", value: text, reason: "expected SIGRTMIN+N or a real-time signal number")
        }
        _ = try resolve()
    }

    /// The signal number on this system.
    public func resolve() throws(ConfigurationError) -> Int32 {
        let span = Int(cstallmon_sigrtmax()) - Int(cstallmon_sigrtmin())
        guard (0...span).contains(offsetFromRTMin) else {
            throw .invalid(key: "signal", value: description,
                           reason: "outside SIGRTMIN..SIGRTMAX (\(cstallmon_sigrtmin())..\(cstallmon_sigrtmax()))")
        }
        return Int32(Int(cstallmon_sigrtmin()) + offsetFromRTMin)
    }

    public var description: String { offsetFromRTMin == 0 ? "SIGRTMIN" : "SIGRTMIN+\(offsetFromRTMin)" }
}
