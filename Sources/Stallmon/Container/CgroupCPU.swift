/// The CPU limit of this process's cgroup and the files its throttling is read from, found once from
/// `/proc/self/cgroup` and `/proc/self/mountinfo`. Everything here runs on the watchdog thread (never a monitored
/// thread); every parser is pure and total: a missing file, an odd format or a read-only `/sys` gives no limit,
/// never a wrong one, and never traps.
struct CgroupCPU: Sendable, Equatable {
    enum Version: String, Sendable, Equatable {
        case v1
        case v2
    }

    /// A CFS bandwidth limit: `quota` microseconds of CPU time per `period` microseconds.
    struct Limit: Sendable, Equatable {
        var quotaMicroseconds: UInt64
        var periodMicroseconds: UInt64

        /// The limit in CPUs (`quota / period`): 0.2 for 20 ms per 100 ms.
        var cpus: Double { Double(quotaMicroseconds) / Double(periodMicroseconds) }
    }

    /// Cumulative throttling of the group holding the limit (its `cpu.stat`).
    struct Throttling: Sendable, Equatable {
        /// Enforcement periods that had runnable threads (`nr_periods`).
        var periods: UInt64
        /// Periods in which the group ran out of quota (`nr_throttled`).
        var throttledPeriods: UInt64
        /// Time the group's run queues were throttled, summed over CPUs (v1 `throttled_time` in ns, v2
        /// `throttled_usec`).
        var throttledNanoseconds: UInt64

        /// How much each counter grew since `before`; nil when one went back (the group was recreated): no figures
        /// rather than wrong ones.
        func growth(since before: Throttling) -> Throttling? {
            guard periods >= before.periods, throttledPeriods >= before.throttledPeriods,
                  throttledNanoseconds >= before.throttledNanoseconds else { return nil }
            return Throttling(periods: periods - before.periods,
                              throttledPeriods: throttledPeriods - before.throttledPeriods,
                              throttledNanoseconds: throttledNanoseconds - before.throttledNanoseconds)
        }
    }

    var version: Version
    /// The tightest limit on the way from the process's group up to the hierarchy's root.
    var limit: Limit
    /// The directory of the group that holds `limit`: its `cpu.stat` counts the throttling of that limit.
    var limitingGroup: String
    /// The group as `/proc/self/cgroup` names it, for reports (`/kubepods/pod…/…`).
    var groupName: String

    /// The limit and its group, or nil when the process has no CPU limit or it cannot be read.
    static func discover(procSelfCgroup: String? = ProcFile.read("/proc/self/cgroup"),
                         mountinfo: String? = ProcFile.read("/proc/self/mountinfo"),
                         readFile: (String) -> String? = ProcFile.read) -> CgroupCPU? {
        guard let procSelfCgroup, let mountinfo else { return nil }
        let groups = Self.groups(procSelfCgroup: procSelfCgroup)
        let mounts = Self.mounts(mountinfo: mountinfo)
        // A v1 cpu controller is where the limit lives on a hybrid host (v2 then has no controllers).
        if let group = groups.v1cpu, let mount = mounts.v1cpu,
           let found = tightest(group: group, mount: mount, version: .v1, readFile: readFile) {
            return found
        }
        if let group = groups.v2, let mount = mounts.v2 {
            return tightest(group: group, mount: mount, version: .v2, readFile: readFile)
        }
        return nil
    }

    /// The throttling counters of the limiting group now, or nil when `cpu.stat` cannot be read.
    func readThrottling(readFile: (String) -> String? = ProcFile.read) -> Throttling? {
        readFile(limitingGroup + "/cpu.stat").flatMap { Self.throttling(cpuStat: $0, version: version) }
    }

    // MARK: - Parsing

    /// The process's group in the v1 `cpu` hierarchy and in the v2 unified one, from `/proc/self/cgroup`
    /// (`hierarchy-id:controllers:path` lines; v2's is `0::/path`).
    static func groups(procSelfCgroup text: String) -> (v1cpu: String?, v2: String?) {
        var v1cpu: String?
        var v2: String?
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard fields.count == 3, fields[2].hasPrefix("/") else { continue }
            if fields[0] == "0" && fields[1].isEmpty {
                v2 = String(fields[2])
            } else if fields[1].split(separator: ",").contains("cpu") {
                v1cpu = String(fields[2])
            }
        }
        return (v1cpu, v2)
    }

    /// Where a hierarchy is mounted: the group path its mount shows (`root`, not `/` inside a container that
    /// sees only its own subtree) and the mount point.
    struct Mount: Sendable, Equatable {
        var root: String
        var point: String
    }

    /// The v1 `cpu` and the v2 mounts from `/proc/self/mountinfo` (`id parent major:minor root point options
    /// [optional…] - type source super-options`). Paths are octal-escaped there (`\040` for a space).
    static func mounts(mountinfo text: String) -> (v1cpu: Mount?, v2: Mount?) {
        var v1cpu: Mount?
        var v2: Mount?
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: " ")
            guard let dash = fields.firstIndex(of: "-"), dash >= 5, fields.count > dash + 1 else { continue }
            let mount = Mount(root: unescape(fields[3]), point: unescape(fields[4]))
            switch fields[dash + 1] {
            case "cgroup2" where v2 == nil:
                v2 = mount
            case "cgroup" where v1cpu == nil && fields.count > dash + 3:
                if fields[dash + 3].split(separator: ",").contains("cpu") { v1cpu = mount }
            default:
                break
            }
        }
        return (v1cpu, v2)
    }

    /// `\ooo` octal escapes of mountinfo undone.
    static func unescape(_ field: Substring) -> String {
        guard field.contains("\\") else { return String(field) }
        var bytes: [UInt8] = []
        var utf8 = Array(field.utf8)[...]
        while let byte = utf8.popFirst() {
            if byte == UInt8(ascii: "\\"), utf8.count >= 3,
               let value = UInt8(String(decoding: utf8.prefix(3), as: UTF8.self), radix: 8) {
                bytes.append(value)
                utf8 = utf8.dropFirst(3)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// v2 `cpu.max`: `max 100000` (no limit) or `20000 100000`.
    static func limit(cpuMax text: String) -> Limit? {
        let fields = text.split(whereSeparator: \.isWhitespace)
        guard fields.count == 2, let quota = UInt64(fields[0]), let period = UInt64(fields[1]), quota > 0,
              period > 0 else { return nil }
        return Limit(quotaMicroseconds: quota, periodMicroseconds: period)
    }

    /// v1 `cpu.cfs_quota_us` (`-1`: no limit) and `cpu.cfs_period_us`.
    static func limit(cfsQuota: String, cfsPeriod: String) -> Limit? {
        guard let quota = Int64(cfsQuota.trimmingWhitespace()), quota > 0,
              let period = UInt64(cfsPeriod.trimmingWhitespace()), period > 0 else { return nil }
        return Limit(quotaMicroseconds: UInt64(quota), periodMicroseconds: period)
    }

    /// `cpu.stat`'s throttling counters; nil unless all three are there.
    static func throttling(cpuStat text: String, version: Version) -> Throttling? {
        var periods: UInt64?
        var throttled: UInt64?
        var time: UInt64?
        for line in text.split(separator: "\n") {
            let pair = line.split(separator: " ")
            guard pair.count == 2, let value = UInt64(pair[1]) else { continue }
            switch (pair[0], version) {
            case ("nr_periods", _): periods = value
            case ("nr_throttled", _): throttled = value
            case ("throttled_time", .v1): time = value
            case ("throttled_usec", .v2): time = value.multipliedReportingOverflow(by: 1000).partialValue
            default: break
            }
        }
        guard let periods, let throttled, let time else { return nil }
        return Throttling(periods: periods, throttledPeriods: throttled, throttledNanoseconds: time)
    }

    /// The group's directory under the mount: `group` with the mount's `root` taken off. nil for a group outside
    /// the mounted subtree (another namespace's path).
    static func directory(group: String, mount: Mount) -> String? {
        let root = mount.root == "/" ? "" : mount.root
        guard group == root || group.hasPrefix(root + "/") || root.isEmpty else { return nil }
        let relative = group.dropFirst(root.count)
        let point = mount.point.hasSuffix("/") ? String(mount.point.dropLast()) : mount.point
        return relative == "/" || relative.isEmpty ? point : point + relative
    }

    /// Walks from the process's group up to the mount point and keeps the tightest limit (in CPUs).
    private static func tightest(group: String, mount: Mount, version: Version,
                                 readFile: (String) -> String?) -> CgroupCPU? {
        guard var directory = directory(group: group, mount: mount) else { return nil }
        let top = mount.point.hasSuffix("/") && mount.point.count > 1 ? String(mount.point.dropLast()) : mount.point
        var best: (limit: Limit, directory: String)?
        while true {
            let limit: Limit? = switch version {
            case .v2: readFile(directory + "/cpu.max").flatMap { Self.limit(cpuMax: $0) }
            case .v1:
                readFile(directory + "/cpu.cfs_quota_us").flatMap { quota in
                    readFile(directory + "/cpu.cfs_period_us").flatMap { Self.limit(cfsQuota: quota, cfsPeriod: $0) }
                }
            }
            if let limit, limit.cpus < best?.limit.cpus ?? .infinity { best = (limit, directory) }
            guard directory.count > top.count, let slash = directory.lastIndex(of: "/") else { break }
            directory = String(directory[..<slash])
            if directory.count < top.count { break }
        }
        guard let best else { return nil }
        return CgroupCPU(version: version, limit: best.limit, limitingGroup: best.directory, groupName: group)
    }
}
