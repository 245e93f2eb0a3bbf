import CStallmonCapture
import CStallmonLoopShims
import Logging
import StallmonLoop
import StallmonReport

/// The monitor of one loop thread, whatever kind of loop it is: a `MonitorCore` over the loop thread's source (the
/// probe the loop stores its busy intervals into, the binding to the loop thread, the iteration's annotations).
/// `LooperStallMonitor` drives it from a `Looper`'s observers; StallmonNIO from an event loop's selector waits.
package final class LoopThreadMonitor: Sendable {
    private let core: MonitorCore
    private let probe: LoopProbe
    private let binding: ThreadBinding
    private let annotations: IterationAnnotations

    package var name: String { core.name }
    package var configuration: StallMonitorConfiguration { core.configuration }

    /// Validates `configuration`, takes the sampling signal and joins the pipeline of its report directory.
    /// `currentLabel` is read by the watchdog (the loop's label of the work in progress, 0 for none), and so is
    /// `currentMode` (the run-loop mode of the iteration in progress, nil for loops without modes);
    /// `sections` are what the loop's kind adds to each of its stalls' reports (StallmonNIO: the tick's phase).
    package init(name: String, configuration: StallMonitorConfiguration, logger: Logger,
                 sinks: [any StallReportSink], currentLabel: @escaping @Sendable () -> UInt32 = { 0 },
                 currentMode: @escaping @Sendable () -> String? = { nil },
                 sections: [any StallSection] = []) throws(StallMonitorError) {
        let probe = LoopProbe(thresholdNanoseconds: UInt64(configuration.detection.threshold.nanosecondsClamped))
        let binding = ThreadBinding()
        let annotations = IterationAnnotations()
        self.probe = probe
        self.binding = binding
        self.annotations = annotations
        core = try MonitorCore(name: name, configuration: configuration, logger: logger, sinks: sinks,
                               ) { collaborators in
            LoopThreadSource(probe: probe, binding: binding, loopName: name, currentLabel: currentLabel,
                             currentMode: currentMode, sections: sections, annotations: annotations,
                             collaborators: collaborators)
        }
    }

    deinit {
        stop()
    }

    /// See `MonitorCore.check`.
    package static func check(_ configuration: StallMonitorConfiguration,
                              sinks: [any StallReportSink]) throws(StallMonitorError) {
        try MonitorCore.check(configuration, sinks: sinks)
    }

    /// The probe the loop thread stores its busy intervals into.
    package var loopProbe: LoopProbe { probe }

    /// Starts the sinks not yet started and the watchdog thread. Returns false when it was already started or
    /// stopped. Logs (once) when the watchdog thread cannot be created.
    @discardableResult
    package func start() -> Bool {
        core.start { probe.monitoringSince.store(cstallmon_monotonic_ns(), ordering: .releasing) }
    }

    /// Joins the watchdog (a stall in progress is written as ongoing), waits until the pipeline wrote this loop's
    /// reports, stops the sinks no other monitor uses (up to 2 s each; the writer is waited for at most 5 s) and
    /// returns the capture slot. Idempotent.
    package func stop() {
        core.stop {
            // Closed for good: a bind already running on the loop thread either lands before this and its slot is
            // released here, or sees the binding closed and releases its own.
            if let bound = binding.close(), bound.slot >= 0 { cstallmon_slot_release(bound.slot) }
        }
    }

    /// On the loop thread: reserve a capture slot for this thread and warm libunwind up with one capture of itself,
    /// so the first real capture does not pay for lazy initialisation. Cheap when already bound to this thread.
    package func bindCurrentThread() {
        let tid = cstallmon_gettid()
        if let bound = binding.load(), bound.tid == tid { return }
        let slot = cstallmon_slot_acquire(tid)
        let status = slot >= 0 ? cstallmon_warm_up(slot) : Int32(CSTALLMON_CAPTURE_NOT_READY.rawValue)
        let (accepted, previous) = binding.replace(tid: tid, slot: slot, warmUpStatus: Int32(status))
        if !accepted {
            if slot >= 0 { cstallmon_slot_release(slot) }  // the monitor stopped while we bound
        } else if let previous, previous.slot >= 0 {
            cstallmon_slot_release(previous.slot)
        }
    }

    /// True once `stop()` began.
    package var isStopped: Bool { core.isStopped }

    /// The kernel thread id the capture is bound to, once the loop thread bound itself.
    package var boundThreadID: Int32? { binding.load()?.tid }

    /// See `LooperStallMonitor.annotate`.
    package func annotate(_ key: String, _ value: String) {
        annotations.set(key, value, iteration: probe.currentIteration())
    }

    package var statistics: StallMonitorStatistics {
        var statistics = core.counters.snapshot(longIterations: Int(probe.longIterationCount.load(ordering: .relaxed)))
        statistics.loop = probe.statistics(at: cstallmon_monotonic_ns())
        return statistics
    }
}
