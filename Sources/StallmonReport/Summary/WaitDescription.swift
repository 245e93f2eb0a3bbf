extension StallReport.WaitingOn {
    /// What the wait was for, without what changes from one stall to the next (lock addresses, thread ids, a
    /// client's ephemeral port), so that `stallmon report` can say what a group's stalls most often waited on:
    /// `pthread mutex held by "ledger-writer" running Ledger.flush()`, `TCP → 10.0.0.5:5432`, `fsync /var/lib/x`,
    /// `nanosleep`.
    public var groupDescription: String {
        switch kind {
        case "lock":
            guard holderThread != nil else { return "\(syscall) (owner unknown)" }
            let lock = target.flatMap { $0.range(of: " 0x").map { range in String(target![..<range.lowerBound]) } }
                ?? "lock"
            var text = "\(lock) held by " + (holderName.map { "\"\($0)\"" } ?? "an exited thread")
            if let running = holderTopFrame?.symbol { text += " running \(running)" }
            return text
        case "socket":
            guard let target else { return syscall }
            // `TCP 127.0.0.1:39514 → 10.0.0.5:5432`: the protocol and the peer.
            if let arrow = target.range(of: " → "), let space = target.firstIndex(of: " ") {
                return "\(target[..<space]) → \(target[arrow.upperBound...])"
            }
            return target
        default:
            return target.map { "\(syscall) \($0)" } ?? syscall
        }
    }
}
