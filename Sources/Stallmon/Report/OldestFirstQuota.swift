/// The one quota rule of the report directory (`ReportRetention`) and the upload spool (`SpoolQuota`), as a pure
/// function: entries sorted oldest first (by name: reports are named by the stall's UTC start) are removed until what
/// remains is within a count, a byte and an age limit. An entry too old goes wherever it stands (its time need not
/// follow name order: a long stall's final report is written after a later, shorter one's); one `removable` refuses
/// stays and still counts.
package enum OldestFirstQuota {
    /// The entries to remove, in their order, so that at most `maxCount` entries and `maxBytes` remain, none older
    /// than `maxAgeNanoseconds` at `now`. `bytes` and `time` (nanoseconds since the epoch) read an entry.
    package static func entriesToRemove<Entry>(_ entries: [Entry], maxCount: Int, maxBytes: Int,
                                               maxAgeNanoseconds: UInt64, now: UInt64, bytes: (Entry) -> Int,
                                               time: (Entry) -> UInt64,
                                               removable: (Entry) -> Bool = { _ in true }) -> [Entry] {
        var count = entries.count
        // Saturating: a sparse file can claim 2^63 - 1 bytes.
        var total = entries.reduce(0) { sum, entry in
            let (next, overflow) = sum.addingReportingOverflow(max(bytes(entry), 0))
            return overflow ? .max : next
        }
        var remove: [Entry] = []
        for entry in entries {
            let tooOld = now > time(entry) && now - time(entry) > maxAgeNanoseconds
            guard tooOld || count > maxCount || total > maxBytes else { continue }
            guard removable(entry) else { continue }
            remove.append(entry)
            count -= 1
            total -= min(max(bytes(entry), 0), total)
        }
        return remove
    }
}
