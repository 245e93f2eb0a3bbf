import Foundation
@testable import Stallmon
import StallmonReport
import Testing

/// The cgroup's CPU limit, found from recorded files of real hosts: no threads, no /sys.
struct CgroupCPUTests {
    /// A Kubernetes pod on a cgroup v2 host (systemd driver), as the container sees it: the namespace's root is the
    /// container's group, so `/proc/self/cgroup` says `0::/`.
    static let kubernetesV2 = (
        cgroup: "0::/\n",
        mountinfo: """
            1268 1258 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup rw,nsdelegate,memory_recursiveprot
            1269 1258 0:73 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
            """)

    /// A systemd service with `CPUQuota=` on a cgroup v2 host, seen from the host's namespace.
    static let systemdV2 = (
        cgroup: "0::/system.slice/my-service.service\n",
        mountinfo: """
            24 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
            35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate
            """)

    /// A Docker container on a cgroup v1 host (this machine's layout: cpu and cpuacct mounted apart).
    static let dockerV1 = (
        cgroup: """
            12:pids:/docker/4f1c
            4:memory:/docker/4f1c
            3:cpu,cpuacct:/docker/4f1c
            1:name=systemd:/docker/4f1c
            0::/system.slice/containerd.service
            """,
        mountinfo: """
            30 25 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:5 - tmpfs tmpfs ro,mode=755
            33 30 0:29 /docker/4f1c /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,cpu,cpuacct
            34 30 0:30 /docker/4f1c /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,memory
            """)

    static func files(_ files: [String: String]) -> (String) -> String? {
        { files[$0] }
    }

    @Test func aKubernetesPodsLimitIsReadFromItsOwnCpuMax() {
        let found = CgroupCPU.discover(procSelfCgroup: Self.kubernetesV2.cgroup, mountinfo: Self.kubernetesV2.mountinfo,
                                       readFile: Self.files(["/sys/fs/cgroup/cpu.max": "50000 100000\n"]))
        #expect(found == CgroupCPU(version: .v2, limit: .init(quotaMicroseconds: 50_000, periodMicroseconds: 100_000),
                                   limitingGroup: "/sys/fs/cgroup", groupName: "/"))
        #expect(found?.limit.cpus == 0.5)
    }

    @Test func theTightestLimitOnTheWayUpWinsAndMaxIsNone() {
        let files = Self.files([
            "/sys/fs/cgroup/system.slice/my-service.service/cpu.max": "max 100000\n",
            "/sys/fs/cgroup/system.slice/cpu.max": "150000 100000\n",
            "/sys/fs/cgroup/cpu.max": "max 100000\n",  // the root has none in reality: an odd host must not matter
        ])
        let found = CgroupCPU.discover(procSelfCgroup: Self.systemdV2.cgroup, mountinfo: Self.systemdV2.mountinfo,
                                       readFile: files)
        #expect(found?.limit.cpus == 1.5)
        #expect(found?.limitingGroup == "/sys/fs/cgroup/system.slice")
        #expect(found?.groupName == "/system.slice/my-service.service")

        let tighter = Self.files([
            "/sys/fs/cgroup/system.slice/my-service.service/cpu.max": "20000 100000",
            "/sys/fs/cgroup/system.slice/cpu.max": "150000 100000",
        ])
        #expect(CgroupCPU.discover(procSelfCgroup: Self.systemdV2.cgroup, mountinfo: Self.systemdV2.mountinfo,
                                   readFile: tighter)?.limit.cpus == 0.2)
        let unlimited = Self.files(["/sys/fs/cgroup/system.slice/my-service.service/cpu.max": "max 100000"])
        #expect(CgroupCPU.discover(procSelfCgroup: Self.systemdV2.cgroup, mountinfo: Self.systemdV2.mountinfo,
                                   readFile: unlimited) == nil)
    }

    @Test func aDockerContainerOnV1IsFoundUnderItsMountRoot() {
        let files = Self.files([
            "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "200000\n",
            "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
        ])
        let found = CgroupCPU.discover(procSelfCgroup: Self.dockerV1.cgroup, mountinfo: Self.dockerV1.mountinfo,
                                       readFile: files)
        #expect(found == CgroupCPU(version: .v1, limit: .init(quotaMicroseconds: 200_000, periodMicroseconds: 100_000),
                                   limitingGroup: "/sys/fs/cgroup/cpu,cpuacct", groupName: "/docker/4f1c"))
        let noQuota = Self.files([
            "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
            "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
        ])
        #expect(CgroupCPU.discover(procSelfCgroup: Self.dockerV1.cgroup, mountinfo: Self.dockerV1.mountinfo,
                                   readFile: noQuota) == nil)
    }

    @Test(arguments: ["", "max", "0 100000", "20000 0", "-5 100000", "abc def", "20000 100000 7", "99999999999999999999 1"])
    func oddCpuMaxGivesNoLimit(_ text: String) {
        #expect(CgroupCPU.limit(cpuMax: text) == nil)
    }

    @Test func badOrMissingFilesGiveNoLimitNeverATrap() {
        #expect(CgroupCPU.discover(procSelfCgroup: nil, mountinfo: nil) == nil)
        #expect(CgroupCPU.discover(procSelfCgroup: "garbage", mountinfo: "more garbage - -", readFile: { _ in nil }) == nil)
        // A group outside the mounted subtree (another namespace's path) is not guessed at.
        #expect(CgroupCPU.directory(group: "/other", mount: .init(root: "/docker/4f1c", point: "/sys/fs/cgroup/cpu"))
                == nil)
        #expect(CgroupCPU.directory(group: "/docker/4f1c/sub", mount: .init(root: "/docker/4f1c", point: "/x"))
                == "/x/sub")
        #expect(CgroupCPU.unescape("/sys/fs/cgroup/with\\040space") == "/sys/fs/cgroup/with space")
        #expect(CgroupCPU.throttling(cpuStat: "nr_periods 5\nnr_throttled x\nthrottled_time 7", version: .v1) == nil)
    }

    @Test func throttlingCountersOfBothVersions() {
        let v1 = "nr_periods 83\nnr_throttled 82\nthrottled_time 7642126223\nnr_bursts 0\nburst_time 0\n"
        #expect(CgroupCPU.throttling(cpuStat: v1, version: .v1)
                == .init(periods: 83, throttledPeriods: 82, throttledNanoseconds: 7_642_126_223))
        let v2 = """
            usage_usec 4155383
            user_usec 3957104
            system_usec 198279
            nr_periods 210
            nr_throttled 208
            throttled_usec 20512345
            nr_bursts 0
            burst_usec 0
            """
        #expect(CgroupCPU.throttling(cpuStat: v2, version: .v2)
                == .init(periods: 210, throttledPeriods: 208, throttledNanoseconds: 20_512_345_000))
        // v2 without a limit anywhere has no nr_periods: no figures.
        #expect(CgroupCPU.throttling(cpuStat: "usage_usec 1\nuser_usec 1\nsystem_usec 0\n", version: .v2) == nil)
    }

    @Test func pressureAndStealParse() {
        let pressure = "some avg10=5.43 avg60=39.93 avg300=55.77 total=7966971400\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
        #expect(CPUContention.someTotal(pressure) == 7_966_971_400)
        #expect(CPUContention.someTotal("full avg10=0 total=5") == nil)
        #expect(CPUContention.stealTicks("cpu  2690599 184 343555 1359505 7985 0 3525 552 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n") == 552)
        #expect(CPUContention.stealTicks("cpu  1 2 3") == nil)
    }
}

/// The class of a stall from where its thread's time went and what the CPU limit withheld: the rule of
/// ReadingAStall, on recorded figures.
struct ThrottledClassTests {
    static let limit = CgroupCPU(version: .v1, limit: .init(quotaMicroseconds: 20_000, periodMicroseconds: 100_000),
                                 limitingGroup: "/sys/fs/cgroup/cpu/demo", groupName: "/demo")

    static func reading(at: UInt64, _ periods: UInt64, _ throttled: UInt64, _ throttledMs: UInt64,
                        pressure: UInt64? = nil) -> CPUContention.Reading {
        .init(at: at, throttling: .init(periods: periods, throttledPeriods: throttled,
                                         throttledNanoseconds: throttledMs * 1_000_000),
              pressureSomeMicroseconds: pressure)
    }

    static func figures(throttledPeriods: UInt64, throttledMs: UInt64, windowMs: UInt64 = 100)
        -> StallReport.CPUContention? {
        CPUContention.figures(cgroup: limit, pressureScope: "host",
                              from: reading(at: 1_000_000_000, 10, 5, 500, pressure: 1_000),
                              to: reading(at: 1_000_000_000 + windowMs * 1_000_000, 12, 5 + throttledPeriods,
                                          500 + throttledMs, pressure: 1_000 + windowMs * 800),
                              stealFrom: nil, stealTo: nil, ticksPerSecond: 100, onlineCPUs: 2,
                              watchdogRunDelayNanoseconds: nil)
    }

    /// The measured case of the issue: 97 ms watched, 17.8 on CPU, 79.3 waiting; the group throttled for 80 ms.
    @Test func aWaitCoveredByThrottlingIsThrottled() {
        let figures = Self.figures(throttledPeriods: 1, throttledMs: 80, windowMs: 97)
        #expect(figures?.periods == 2)
        #expect(figures?.throttledPeriods == 1)
        #expect(figures?.throttledMs == 80)
        #expect(figures?.limit?.cpus == 0.2)
        #expect(figures?.pressureSomePercent == 80)
        #expect(figures?.throttledWallMs == 80)
        #expect(StallClassifier.classify(cpu: 17_800_000, runDelay: 79_300_000, wall: 97_000_000,
                                         throttledWall: CPUContention.throttledWallBound(figures)) == .throttled)
    }

    /// Throttled time is summed over CPUs: 300 ms on several CPUs within a 100 ms span, but only one period, bounds
    /// the wall time at the span; and a wait the throttling covers for less than half stays starved.
    @Test func mixedCases() {
        let summed = Self.figures(throttledPeriods: 1, throttledMs: 300)
        #expect(summed?.throttledWallMs == 100)
        // 20 ms of throttling against a 79 ms wait: other threads or processes took the rest.
        let little = Self.figures(throttledPeriods: 1, throttledMs: 20)
        #expect(StallClassifier.classify(cpu: 18_000_000, runDelay: 79_000_000, wall: 97_000_000,
                                         throttledWall: CPUContention.throttledWallBound(little)) == .starved)
        // Exactly half covered: throttled.
        let half = Self.figures(throttledPeriods: 1, throttledMs: 40)
        #expect(StallClassifier.classify(cpu: 10_000_000, runDelay: 80_000_000, wall: 95_000_000,
                                         throttledWall: CPUContention.throttledWallBound(half)) == .throttled)
        // No throttled period in the span: starved whatever the time says.
        let none = Self.figures(throttledPeriods: 0, throttledMs: 0)
        #expect(StallClassifier.classify(cpu: 10_000_000, runDelay: 80_000_000, wall: 95_000_000,
                                         throttledWall: CPUContention.throttledWallBound(none)) == .starved)
        // Computing or asleep keeps its class even while the group was throttled.
        let heavy = Self.figures(throttledPeriods: 1, throttledMs: 90)
        #expect(StallClassifier.classify(cpu: 60_000_000, runDelay: 30_000_000, wall: 95_000_000,
                                         throttledWall: CPUContention.throttledWallBound(heavy)) == .cpu)
        #expect(StallClassifier.classify(cpu: 5_000_000, runDelay: 30_000_000, wall: 95_000_000,
                                         throttledWall: CPUContention.throttledWallBound(heavy)) == .blocked)
        // Without a limit (no figures): starved.
        #expect(StallClassifier.classify(cpu: 10_000_000, runDelay: 80_000_000, wall: 95_000_000,
                                         throttledWall: nil) == .starved)
    }

    /// Counters that went back (the group was recreated) give no throttling figures, never negative ones; steal is
    /// per CPU of the host.
    @Test func countersThatWentBackGiveNoFiguresAndStealIsPerCPU() {
        let figures = CPUContention.figures(
            cgroup: Self.limit, pressureScope: nil, from: Self.reading(at: 10, 50, 40, 900),
            to: Self.reading(at: 100_000_010, 3, 1, 5), stealFrom: .init(at: 0, ticks: 100),
            stealTo: .init(at: 100_000_000, ticks: 104), ticksPerSecond: 100, onlineCPUs: 2,
            watchdogRunDelayNanoseconds: 30_000_000)
        #expect(figures?.limit?.cpus == 0.2)
        #expect(figures?.periods == nil && figures?.throttledPeriods == nil && figures?.throttledMs == nil)
        #expect(figures?.throttledWallMs == nil)
        #expect(figures?.stealMs == 20)  // 4 ticks of 10 ms over 2 CPUs
        #expect(figures?.watchdogRunDelayMs == 30)
        #expect(figures?.pressureSomePercent == nil)
    }

    /// A class written by a newer version reads as unknown, not as a broken report.
    @Test func anUnknownClassReadsAsUnknown() throws {
        let decoded = try JSONDecoder().decode([StallClass].self, from: Data(#"["throttled","stolen"]"#.utf8))
        #expect(decoded == [.throttled, .unknown])
    }
}

/// The pool's width against the limit, and the statistics lines' throttling fields.
struct PoolWidthTests {
    @Test func aPoolWiderThanTheLimitIsSaidAndOneThatFitsIsNot() throws {
        let twoCPUs = CgroupCPU.Limit(quotaMicroseconds: 200_000, periodMicroseconds: 100_000)
        let oneAndAHalf = CgroupCPU.Limit(quotaMicroseconds: 150_000, periodMicroseconds: 100_000)
        let warning = try #require(PoolWidth.warning(width: 64, limit: twoCPUs))
        #expect(warning.contains("up to 64 workers") && warning.contains("CPU limit is 2 CPU"), "\(warning)")
        #expect(PoolWidth.warning(width: 2, limit: twoCPUs) == nil)
        // 1.5 CPUs run two workers in parallel in part of each period: not wider.
        #expect(PoolWidth.warning(width: 2, limit: oneAndAHalf) == nil)
        #expect(PoolWidth.warning(width: 3, limit: oneAndAHalf) != nil)
        #expect(PoolWidth.cpus(0.2) == "0.2" && PoolWidth.cpus(2) == "2" && PoolWidth.cpus(1.5) == "1.5")
        #expect(PoolWidth.current() >= 1)
    }

    @Test func statisticsLinesCarryTheWindowsThrottling() {
        var event = StallEvent(time: "t", event: "loop.stats")
        EventLines.throttling(&event, nil)
        #expect(event.cpuLimit == nil && event.periods == nil)
        EventLines.throttling(&event, .init(limitCPUs: 0.5, periods: 10, throttledPeriods: 8,
                                            throttledNanoseconds: 79_000_000))
        #expect(event.cpuLimit == 0.5 && event.periods == 10 && event.throttledPeriods == 8 && event.throttledMs == 79)
    }
}
