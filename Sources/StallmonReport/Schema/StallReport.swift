/// One stall, as written to `<report_dir>/stall-*.json`. The JSON form is a documented contract (README, "Report
/// schema"): fields are only ever added within a schema version.
public struct StallReport: Codable, Sendable, Equatable {
    /// The schema this report follows; readers refuse other names and newer versions.
    public static let currentSchema = "stallmon.report/1"

    /// `File.swift:42`, or `File.swift:?` when DWARF gives the file but no line (as `addr2line` prints it); nil
    /// without a file.
    public static func location(file: String?, line: Int?) -> String? {
        guard let file else { return nil }
        let name = file.split(separator: "/").last.map(String.init) ?? file
        return "\(name):\(line.map(String.init) ?? "?")"
    }

    public var schema: String
    /// Stable id of the stall (an interim report and its final replacement share it).
    public var id: String
    /// True for an interim report of a stall that was still going on when written.
    public var ongoing: Bool
    public var process: ProcessDescription
    public var thread: ThreadDescription
    /// The loop's name: the `Looper`'s name, or the SwiftNIO event loop's thread name (`NIO-ELT-0-#3`).
    public var loop: String
    public var thresholdMs: Double
    public var start: StartTime
    /// Busy time of the stalled iteration: exact from the loop's own clock reads when `durationSource` is "loop";
    /// for an ongoing stall, the time until the report was written ("watchdog").
    public var durationMs: Double
    public var durationSource: String
    /// What the loop was running when the stall was detected (timer, source or block label).
    public var label: String
    /// The W3C trace id (32 lowercase hex digits) of the request the stalled task served, when its `StallLabel`
    /// scope was traced; absent otherwise.
    public var traceId: String?
    /// The W3C span id (16 lowercase hex digits) of the span current when that scope began.
    public var spanId: String?
    /// The most frequent innermost in-app frame across samples: the grouping key of `stallmon report`.
    public var topFrame: FrameSummary?
    public var captures: CaptureCounts
    public var samples: [Sample]
    /// Unique frames referenced by index from `samples[].frames`.
    public var frames: [Frame]
    /// Images loaded at the time (path, build id, load bias), for offline symbolication.
    public var images: [ImageInfo]
    /// Why the loop stalled: `cpu`, `blocked`, `starved`, `throttled` (JSON key `class`).
    public var stallClass: StallClass?
    /// Where the loop thread's time went while the watchdog watched the stall.
    public var threadStats: ThreadFigures?
    /// What withheld the CPU over the same span: the cgroup's CPU limit and its throttling, CPU pressure, steal.
    public var cpuContention: CPUContention?
    /// Time the whole process was frozen (SIGSTOP, debugger, VM freeze) during the iteration; not in `durationMs`.
    public var frozenMs: Double?
    /// Stable id of this kind of stall: a hash of the hottest stack's innermost in-app functions (no addresses).
    public var signature: String?
    /// The path most samples share (Matrix's "point stack").
    public var hottestStack: HottestStack?
    /// All stack samples merged by function, outermost frames at the roots.
    public var callTree: [CallTreeNode]?
    /// Key/values the service attached to the stalled iteration (`LooperStallMonitor.annotate`).
    public var annotations: [String: String]?
    /// Stalls of the same signature that got no report of their own since the previous one (rate limit).
    public var suppressedBefore: Int?
    /// For a SwiftNIO event loop: the phase of the loop's tick the hottest stack ran in, `io` (the selector handing
    /// readiness to channel handlers: `channelRead`, `channelActive`, accepts, writes) or `tasks` (`execute`,
    /// scheduled tasks, future callbacks). Absent for a `Looper` and when no sample had a stack.
    public var phase: String?
    /// For a `Looper`: the run-loop mode the stalled iteration ran in (`default`, or the mode of a nested
    /// `run(in:)`). Absent for other loops.
    public var mode: String?
    /// What the loop thread was blocked on while asleep in a system call, most samples first: the call, and the
    /// descriptor's connection, socket, pipe or file. Absent when no sample found it in a system call.
    public var waitingOn: [WaitingOn]?
    /// For a stall on Swift Concurrency's global executor or the main actor (`ConcurrencyStallMonitor`): the job
    /// that held the worker thread. `loop` is then the pool's name and `thread` the worker. Absent for loops.
    public var job: Job?
    /// Absent for a stall; `starvation` for a starved pool (`ConcurrencyStallMonitor`): every worker busy while a
    /// job waited longer than the threshold. `thread` is then the first culprit's worker, `durationMs` how long the
    /// pool was saturated, `samples` every culprit's, and `signature` the set of the culprits' signatures.
    public var kind: String?
    /// For `kind: starvation`: how long jobs waited, and the culprits: the job each busy worker was running.
    public var starvation: Starvation?
    /// Present when the stall lasted past a hang limit and stallmon acted on it: the report written then (still
    /// `ongoing`), before the process was ended (`hang_action = abort`) or systemd's watchdog stopped being fed.
    public var hang: Hang?

    /// For `kind: snapshot` (a snapshot asked for with `stallmon snapshot PID`): every monitored loop and pool of the
    /// process at that moment.
    public var snapshot: Snapshot?

    /// A running process's monitored loops and pools, as one request saw them.
    public struct Snapshot: Codable, Sendable, Equatable {
        /// One loop, one busy pool worker, or one pool.
        public struct Entry: Codable, Sendable, Equatable {
            /// The loop's name, or the pool's (`swift-global-executor`, `main-actor`).
            public var name: String
            /// `loop`, `worker` (a pool worker running a job), or `pool` (its summary line).
            public var kind: String
            /// The thread (absent for a pool).
            public var thread: ThreadDescription?
            /// `busy` (running an iteration or a job) or `idle`.
            public var state: String
            /// How long the current iteration or job has been running (busy only).
            public var busyMs: Double?
            /// What it runs: a `Looper` label, or the task's `StallLabel`.
            public var label: String?
            /// For a worker: the W3C trace id of its task's traced `StallLabel` scope.
            public var traceId: String?
            /// For a worker: the W3C span id of that scope.
            public var spanId: String?
            /// For a worker: its job.
            public var job: Job?
            /// Index into the report's `samples`: its stack sample, if one was taken.
            public var sample: Int?
            /// The innermost in-app frame of that sample.
            public var topFrame: FrameSummary?
            /// For a pool: what its workers do (`2 of 4 workers busy`).
            public var note: String?

            public init(name: String, kind: String, thread: ThreadDescription?, state: String, busyMs: Double? = nil,
                        label: String? = nil, job: Job? = nil, sample: Int? = nil, topFrame: FrameSummary? = nil,
                        note: String? = nil) {
                self.name = name
                self.kind = kind
                self.thread = thread
                self.state = state
                self.busyMs = busyMs
                self.label = label
                self.job = job
                self.sample = sample
                self.topFrame = topFrame
                self.note = note
            }
        }

        public var entries: [Entry]

        public init(entries: [Entry]) {
            self.entries = entries
        }
    }

    /// What stallmon did about a hung loop.
    public struct Hang: Codable, Sendable, Equatable {
        /// `abort`: the process was ended with SIGABRT (a core dump, where enabled) right after this report was
        /// durable; `watchdog`: systemd's watchdog stopped being fed (`WATCHDOG=1`), so systemd restarts the service.
        public var action: String
        /// The limit the stall crossed, in ms (`hang_abort_after_ms`, or `systemd_hang_after_ms`).
        public var afterMs: Double

        public init(action: String, afterMs: Double) {
            self.action = action
            self.afterMs = afterMs
        }
    }

    /// Members every report has: a file without one of them is incomplete.
    static let requiredKeys = ["schema", "id", "ongoing", "process", "thread", "loop", "thresholdMs", "start",
                               "durationMs", "durationSource", "label", "captures", "samples", "frames", "images"]

    enum CodingKeys: String, CodingKey {
        case schema, id, ongoing, process, thread, loop, thresholdMs, start, durationMs, durationSource, label
        case traceId, spanId, topFrame, captures, samples, frames, images
        case stallClass = "class"
        case threadStats, cpuContention, frozenMs, signature, hottestStack, callTree, annotations, suppressedBefore, phase, mode
        case waitingOn, job, kind, starvation, hang, snapshot
    }

    /// A starved pool: who held every worker, and how long jobs waited for one.
    public struct Starvation: Codable, Sendable, Equatable {
        /// `blocked`: a culprit held its worker throughout, waiting on something (sleep, lock, I/O); `cpu`: held
        /// throughout, computing; `busy`: the workers ran many jobs, none held throughout (a pool busy with work).
        public var verdict: String
        /// Every worker busy: from the moment the last one was taken (its job's begin) to the first job that found
        /// a free worker.
        public var saturatedMs: Double
        /// The longest a job waited for a worker (the probe job stallmon sends, or a job's own queue delay).
        public var oldestWaitMs: Double
        /// Jobs that waited at least the threshold before they began, counted from the detection to the canary's begin
        /// (and the moment after it in which the jobs queued behind it begin). Absent with `pool_statistics = off`.
        public var waitedJobs: Int?
        /// Jobs that finished on the pool over the same span. Absent with `pool_statistics = off`.
        public var jobsRun: Int?
        /// Worker threads of the pool (all busy).
        public var workers: Int
        /// The job each busy worker was running when the starvation was detected, longest-running first.
        public var culprits: [Culprit]
        /// The workers the pool may run at once per priority: one per CPU the process may use, whatever its CPU
        /// limit (libdispatch reads the affinity mask).
        public var poolWidth: Int?
        /// The cgroup's CPU limit in CPUs, when there is one: a pool wider than it throttles itself.
        public var cpuLimit: Double?

        public init(verdict: String, saturatedMs: Double, oldestWaitMs: Double, waitedJobs: Int?, jobsRun: Int?,
                    workers: Int, culprits: [Culprit], poolWidth: Int? = nil, cpuLimit: Double? = nil) {
            self.poolWidth = poolWidth
            self.cpuLimit = cpuLimit
            self.verdict = verdict
            self.saturatedMs = saturatedMs
            self.oldestWaitMs = oldestWaitMs
            self.waitedJobs = waitedJobs
            self.jobsRun = jobsRun
            self.workers = workers
            self.culprits = culprits
        }
    }

    /// One busy worker of a starved pool and what it ran.
    public struct Culprit: Codable, Sendable, Equatable {
        public var thread: ThreadDescription
        public var job: Job?
        /// The label of the job's task (`StallLabel`), when it had one.
        public var label: String?
        /// The W3C trace id of the job's task's traced `StallLabel` scope (its own request's).
        public var traceId: String?
        /// The W3C span id of that scope.
        public var spanId: String?
        /// How long the job had held the worker when the starvation ended (or when its job ended, if sooner).
        public var busyMs: Double
        /// True when the job held its worker for (at least 90 % of) the whole saturation.
        public var heldThroughout: Bool
        public var stallClass: StallClass?
        public var topFrame: FrameSummary?
        public var hottestStack: HottestStack?
        public var waitingOn: [WaitingOn]?
        /// The culprit's own stack signature (as a stall's).
        public var signature: String?
        /// Stack samples taken of it.
        public var samples: Int

        enum CodingKeys: String, CodingKey {
            case thread, job, label, traceId, spanId, busyMs, heldThroughout
            case stallClass = "class"
            case topFrame, hottestStack, waitingOn, signature, samples
        }

        public init(thread: ThreadDescription, job: Job?, label: String? = nil, busyMs: Double, heldThroughout: Bool,
                    stallClass: StallClass?, topFrame: FrameSummary?, hottestStack: HottestStack?,
                    waitingOn: [WaitingOn]?, signature: String?, samples: Int) {
            self.thread = thread
            self.job = job
            self.label = label
            self.busyMs = busyMs
            self.heldThroughout = heldThroughout
            self.stallClass = stallClass
            self.topFrame = topFrame
            self.hottestStack = hottestStack
            self.waitingOn = waitingOn
            self.signature = signature
            self.samples = samples
        }
    }

    /// A Swift Concurrency job: what a worker of the global executor (or the main actor) was running.
    public struct Job: Codable, Sendable, Equatable {
        /// `global` (the global concurrent executor) or `main` (the main actor).
        public var executor: String
        /// The job's priority by name (`high`, `medium`, `low`, `background`, `userInteractive`, `unspecified`),
        /// or its number when it has none.
        public var priority: String
        /// The task's id (`swift_task_getJobTaskId`), for a job that is a task; absent for other jobs (an actor's
        /// drain job runs slices of several tasks in a row, and has no task of its own).
        public var taskId: UInt64?
        /// `task`; `actor` for a default actor's drain job; `continuation`, `isolatedDeinit`, or `job(N)` for a
        /// kind this version does not name.
        public var kind: String
        /// The task's name (`Task(name:)`), when it has one and it could be read.
        public var taskName: String?

        public init(executor: String, priority: String, taskId: UInt64?, kind: String, taskName: String? = nil) {
            self.executor = executor
            self.priority = priority
            self.taskId = taskId
            self.kind = kind
            self.taskName = taskName
        }

        /// The runtime's `JobKind` by name (Swift 6: a task is 0, the other kinds start at 192).
        public static func kindName(_ value: UInt8) -> String {
            switch value {
            case 0: "task"
            case 192, 193, 194: "actor"  // DefaultActorInline, DefaultActorSeparate, DefaultActorOverride
            case 195: "continuation"  // NullaryContinuation
            case 196: "isolatedDeinit"
            default: "job(\(value))"
            }
        }

        /// The runtime's `JobPriority` value by name, as `TaskPriority` spells it.
        public static func priorityName(_ value: UInt8) -> String {
            switch value {
            case 0x21: "userInteractive"
            case 0x19: "high"
            case 0x15: "medium"
            case 0x11: "low"
            case 0x09: "background"
            case 0: "unspecified"
            default: String(value)
            }
        }
    }

    /// One thing the loop thread waited on, and in how many samples.
    public struct WaitingOn: Codable, Sendable, Equatable {
        /// `socket`, `pipe`, `file`, `eventfd`, `lock` (a futex wait), `sleep`, or `syscall`.
        public var kind: String
        /// The system call (`read`, `recvfrom`, `futex`, `nanosleep`, …).
        public var syscall: String
        /// What it waited on: `TCP 127.0.0.1:39514 → 10.0.0.5:5432`, `Unix socket /run/db.sock`, `pipe`, a path.
        public var target: String?
        /// For a lock whose owner the lock records (a pthread mutex, `NIOLock`, `NSLock`, `Synchronization.Mutex`):
        /// the holding thread's id and name (no name: it had exited when the sample looked).
        public var holderThread: Int32?
        public var holderName: String?
        /// Samples that found the thread waiting on it.
        public var samples: Int
        /// The holder's stack most of its captures share (indices into `frames`, innermost first), when it was
        /// sampled (`lock_holder_stacks`); `of` counts its successful captures.
        public var holderStack: HottestStack?
        /// The innermost frame of the service's own code on `holderStack`: what the holder was running.
        public var holderTopFrame: FrameSummary?
        /// What the holder was itself blocked in, on most of the samples that found it asleep in a system call:
        /// `fsync /var/lib/ledger.db`, `nanosleep`.
        public var holderWaiting: String?

        public init(kind: String, syscall: String, target: String? = nil, holderThread: Int32? = nil,
                    holderName: String? = nil, samples: Int, holderStack: HottestStack? = nil,
                    holderTopFrame: FrameSummary? = nil, holderWaiting: String? = nil) {
            self.kind = kind
            self.syscall = syscall
            self.target = target
            self.holderThread = holderThread
            self.holderName = holderName
            self.samples = samples
            self.holderStack = holderStack
            self.holderTopFrame = holderTopFrame
            self.holderWaiting = holderWaiting
        }
    }

    /// What withheld the CPU from the process while the watchdog watched the stall (see ReadingAStall). Every
    /// member is absent when it could not be read.
    public struct CPUContention: Codable, Sendable, Equatable {
        /// The span of the throttling and pressure figures: from the same start as `threadStats` to when they were
        /// read (at most one watchdog poll after the iteration's end).
        public var windowMs: Double
        /// The tightest CPU limit of the process's cgroup and its ancestors; absent without one.
        public var limit: CPULimit?
        /// Enforcement periods of that limit within the span, and how many of them ran out of quota.
        public var periods: Int?
        public var throttledPeriods: Int?
        /// Time the limiting group was throttled within the span, summed over CPUs (so it can exceed the span).
        public var throttledMs: Double?
        /// Share of the span in which some thread of the cgroup (`pressureScope` "cgroup", cgroup v2) or of the
        /// host ("host") waited for a CPU, from `cpu.pressure`'s `some total`.
        public var pressureSomePercent: Double?
        public var pressureScope: String?
        /// The hypervisor's steal over `stealWindowMs` (from the stall's detection on), per CPU of the host.
        public var stealMs: Double?
        public var stealWindowMs: Double?
        /// How long the watchdog itself waited for a CPU from the stall's detection on: when it is large, the watchdog was held
        /// back too (by the same limit) and took fewer samples than `sample_interval_ms` asks for.
        public var watchdogRunDelayMs: Double?

        package init(windowMs: Double) {
            self.windowMs = windowMs
        }

        /// The most wall time the limit can have withheld the CPU in the span: at most the time throttled (summed
        /// over CPUs, so at least the wall time of any one CPU's throttling), at most the throttled periods'
        /// length, at most the span. nil without throttling figures.
        public var throttledWallMs: Double? {
            guard let limit, let throttledPeriods, let throttledMs else { return nil }
            return max(0, min(throttledMs, Double(throttledPeriods) * limit.periodMs, windowMs))
        }
    }

    /// A CFS bandwidth limit: `cpus` CPUs' worth of time per `periodMs` (Kubernetes `limits.cpu`, Docker `--cpus`,
    /// systemd `CPUQuota=`).
    public struct CPULimit: Codable, Sendable, Equatable {
        public var cpus: Double
        public var periodMs: Double
        /// The process's cgroup as `/proc/self/cgroup` names it (the limit may sit on an ancestor).
        public var cgroup: String
        /// `v1` or `v2`.
        public var version: String

        package init(cpus: Double, periodMs: Double, cgroup: String, version: String) {
            self.cpus = cpus
            self.periodMs = periodMs
            self.cgroup = cgroup
            self.version = version
        }
    }

    public struct ThreadFigures: Codable, Sendable, Equatable {
        /// The span measured (from when the watchdog first saw the iteration busy to when it saw it end).
        public var windowMs: Double
        /// On a CPU, runnable but waiting for one, and the rest (asleep or blocked), in that span.
        public var cpuMs: Double
        public var runDelayMs: Double
        public var sleepMs: Double
        public var voluntarySwitches: Int
        public var involuntarySwitches: Int

        package init(
            windowMs: Double,
            cpuMs: Double,
            runDelayMs: Double,
            sleepMs: Double,
            voluntarySwitches: Int,
            involuntarySwitches: Int
        ) {
            self.windowMs = windowMs
            self.cpuMs = cpuMs
            self.runDelayMs = runDelayMs
            self.sleepMs = sleepMs
            self.voluntarySwitches = voluntarySwitches
            self.involuntarySwitches = involuntarySwitches
        }
    }

    public struct ProcessDescription: Codable, Sendable, Equatable {
        public var pid: Int32
        public var executable: String
        public var buildId: String?
        public var hostname: String

        package init(pid: Int32, executable: String, buildId: String? = nil, hostname: String) {
            self.pid = pid
            self.executable = executable
            self.buildId = buildId
            self.hostname = hostname
        }
    }

    public struct ThreadDescription: Codable, Sendable, Equatable {
        public var tid: Int32
        public var name: String

        package init(tid: Int32, name: String) {
            self.tid = tid
            self.name = name
        }
    }

    public struct StartTime: Codable, Sendable, Equatable {
        /// Wall clock, ISO 8601 UTC with milliseconds.
        public var wall: String
        /// CLOCK_MONOTONIC nanoseconds (compare within one boot only).
        public var monotonicNs: UInt64

        package init(wall: String, monotonicNs: UInt64) {
            self.wall = wall
            self.monotonicNs = monotonicNs
        }
    }

    public struct CaptureCounts: Codable, Sendable, Equatable {
        public var attempted: Int
        public var succeeded: Int
        public var timedOut: Int
        /// Median and maximum pause of the loop thread per capture, microseconds.
        public var pauseMedianUs: Double?
        public var pauseMaxUs: Double?

        package init(
            attempted: Int,
            succeeded: Int,
            timedOut: Int,
            pauseMedianUs: Double? = nil,
            pauseMaxUs: Double? = nil
        ) {
            self.attempted = attempted
            self.succeeded = succeeded
            self.timedOut = timedOut
            self.pauseMedianUs = pauseMedianUs
            self.pauseMaxUs = pauseMaxUs
        }
    }

    public struct Sample: Codable, Sendable, Equatable {
        /// Time since the stalled iteration began.
        public var offsetMs: Double
        public var status: CaptureStatus
        /// Indices into `frames`, innermost first.
        public var frames: [Int]
        public var truncated: Bool
        /// The label of what the loop ran at that moment.
        public var label: String?
        /// The thread's state just before the capture (R running, S sleeping, D uninterruptible, …).
        public var state: String?
        /// True when the capture found the loop back in epoll: no evidence, left out of the aggregation.
        public var idle: Bool?
        /// True when the stack reached code in no loaded image stallmon knew of (JIT code, or an object loaded
        /// a moment before): its last frame is that code, and nothing beyond it was guessed.
        public var unknownImage: Bool?
        /// Index into `waitingOn`: what the thread was blocked on at this sample (so a lock's holder changing
        /// during the stall shows sample by sample).
        public var waiting: Int?
        /// The lock holder at this sample: its state letter, the outcome of capturing its stack (nil: it was not
        /// signalled, see `lock_holder_stacks`), its stack (indices into `frames`) and what it was blocked in.
        public var holderState: String?
        public var holderStatus: CaptureStatus?
        public var holderFrames: [Int]?
        public var holderWaiting: String?
        /// True when the job's await chain (the `async` frames) was longer than stallmon follows: its outermost
        /// awaiting callers are missing.
        public var awaitChainTruncated: Bool?

        package init(
            offsetMs: Double,
            status: CaptureStatus,
            frames: [Int],
            truncated: Bool,
            label: String? = nil,
            state: String? = nil,
            idle: Bool? = nil
        ) {
            self.offsetMs = offsetMs
            self.status = status
            self.frames = frames
            self.truncated = truncated
            self.label = label
            self.state = state
            self.idle = idle
        }
    }

    public struct Frame: Codable, Sendable, Equatable {
        /// The raw address, hex: the program counter for a sample's first frame, a return address otherwise.
        public var address: String
        /// Index into `images`.
        public var image: Int?
        public var module: String?
        public var buildId: String?
        /// Offset of the looked-up address in its module, hex (for `addr2line -e module offset`).
        public var offset: String?
        public var symbol: String?
        public var symbolOffset: Int?
        public var file: String?
        /// The DWARF line. Code the line table marks line 0 (compiler-generated: Swift's debug builds mark so the
        /// call that advances a `for` loop) has the last line before it in its function, as
        /// `llvm-symbolizer --skip-line-zero` gives it; nil when there is none.
        public var line: Int?
        public var inApp: Bool
        /// True when the compiler inlined this function into the next frame: both share one address, and this
        /// frame's `file`/`line` is inside the inlined function. Absent for physical frames.
        public var inlined: Bool?
        /// True for a frame of a job's await chain: an async function suspended awaiting the frame before it, at the
        /// place it resumes (`address` is that resume point, a function's entry; `file`/`line` where it resumes).
        /// Absent for frames on the thread's stack.
        public var async: Bool?

        public init(address: String, image: Int? = nil, module: String? = nil, buildId: String? = nil,
                    offset: String? = nil, symbol: String? = nil, symbolOffset: Int? = nil, file: String? = nil,
                    line: Int? = nil, inApp: Bool, inlined: Bool? = nil, async: Bool? = nil) {
            self.address = address
            self.image = image
            self.module = module
            self.buildId = buildId
            self.offset = offset
            self.symbol = symbol
            self.symbolOffset = symbolOffset
            self.file = file
            self.line = line
            self.inApp = inApp
            self.inlined = inlined
            self.async = async
        }
    }

    public struct FrameSummary: Codable, Sendable, Equatable {
        public var symbol: String
        public var module: String?
        public var file: String?
        public var line: Int?

        /// `symbol (file:line)` or `symbol`.
        public var displayName: String {
            guard let location = StallReport.location(file: file, line: line) else { return symbol }
            return "\(symbol) (\(location))"
        }

        package init(symbol: String, module: String? = nil, file: String? = nil, line: Int? = nil) {
            self.symbol = symbol
            self.module = module
            self.file = file
            self.line = line
        }
    }

    package init(
        schema: String,
        id: String,
        ongoing: Bool,
        process: ProcessDescription,
        thread: ThreadDescription,
        loop: String,
        thresholdMs: Double,
        start: StartTime,
        durationMs: Double,
        durationSource: String,
        label: String,
        topFrame: FrameSummary? = nil,
        captures: CaptureCounts,
        samples: [Sample],
        frames: [Frame],
        images: [ImageInfo],
        stallClass: StallClass? = nil,
        threadStats: ThreadFigures? = nil,
        cpuContention: CPUContention? = nil,
        frozenMs: Double? = nil,
        signature: String? = nil,
        hottestStack: HottestStack? = nil,
        callTree: [CallTreeNode]? = nil,
        annotations: [String: String]? = nil,
        suppressedBefore: Int? = nil,
        phase: String? = nil,
        mode: String? = nil
    ) {
        self.schema = schema
        self.id = id
        self.ongoing = ongoing
        self.process = process
        self.thread = thread
        self.loop = loop
        self.thresholdMs = thresholdMs
        self.start = start
        self.durationMs = durationMs
        self.durationSource = durationSource
        self.label = label
        self.topFrame = topFrame
        self.captures = captures
        self.samples = samples
        self.frames = frames
        self.images = images
        self.stallClass = stallClass
        self.threadStats = threadStats
        self.cpuContention = cpuContention
        self.frozenMs = frozenMs
        self.signature = signature
        self.hottestStack = hottestStack
        self.callTree = callTree
        self.annotations = annotations
        self.suppressedBefore = suppressedBefore
        self.phase = phase
        self.mode = mode
    }
}
