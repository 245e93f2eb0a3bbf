import StallmonLoop

/// The watchdog's decisions as a pure state machine over readings of the loop probe and an injected clock: is
/// this a stall, is a sample due, is an interim report due, has the stall ended. Tested without threads; the
/// watchdog thread only carries out what it returns.
struct StallDetector: Sendable {
    struct Configuration: Sendable {
        var threshold: UInt64
        var sampleInterval: UInt64
        var maxSamples: Int
        var interimAfter: UInt64
        /// How long the watchdog sleeps while the loop is idle. Any iteration starts less than this before the
        /// watchdog next looks, so it then sleeps exactly until that iteration would cross the threshold.
        var idlePoll: UInt64 { Self.idlePoll(threshold: threshold) }

        /// Three quarters of `threshold` (1 ms at least): a quarter is left for the watchdog's own lateness before an
        /// iteration that began just after a pass would be seen after its crossing. An idle pass is most of the
        /// monitor's cost in an idle service (a wake-up and the freeze evidence), so the poll is as long as that
        /// margin allows; a pool's starvation checks share it, so that every source is stepped in the same passes.
        static func idlePoll(threshold: UInt64) -> UInt64 { max(1_000_000, threshold - threshold / 4) }
    }

    /// What the probe says about the loop.
    typealias Reading = LoopProbe.Reading

    enum Action: Equatable, Sendable {
        /// A stall began: capture the first sample and announce it.
        case begin(iteration: UInt64, since: UInt64)
        /// Capture one more sample of the ongoing stall.
        case sample
        /// Write the interim (ongoing) report.
        case interim
        /// The stalled iteration is over: finalize it.
        case finish(iteration: UInt64, since: UInt64)
    }

    struct Tracking: Equatable, Sendable {
        var iteration: UInt64
        var since: UInt64
        var samples: Int
        var nextSampleAt: UInt64
        var interimSent: Bool
    }

    let configuration: Configuration
    private(set) var tracking: Tracking?

    init(configuration: Configuration) {
        self.configuration = configuration
    }

    /// Decides what to do at `now` given `reading`; returns the actions in order and when to look again.
    mutating func step(_ reading: Reading, now: UInt64) -> (actions: [Action], wakeAt: UInt64) {
        var actions: [Action] = []
        if var current = tracking {
            if case .busy(let iteration, _) = reading, iteration == current.iteration {
                if current.samples < configuration.maxSamples && now >= current.nextSampleAt {
                    actions.append(.sample)
                    current.samples += 1
                    // Keep the cadence; after a late wake-up, resume from now instead of bursting.
                    let next = current.nextSampleAt + configuration.sampleInterval
                    current.nextSampleAt = next > now ? next : now + configuration.sampleInterval
                }
                if !current.interimSent && now - current.since >= configuration.interimAfter {
                    actions.append(.interim)
                    current.interimSent = true
                }
                tracking = current
                return (actions, wakeWhileTracking(current, now: now))
            }
            actions.append(.finish(iteration: current.iteration, since: current.since))
            tracking = nil
        }
        switch reading {
        case .idle:
            return (actions, now + configuration.idlePoll)
        case .busy(let iteration, let since):
            let crossing = since + configuration.threshold
            if now >= crossing {
                actions.append(.begin(iteration: iteration, since: since))
                let current = Tracking(iteration: iteration, since: since, samples: 1,
                                       nextSampleAt: now + configuration.sampleInterval, interimSent: false)
                tracking = current
                return (actions, wakeWhileTracking(current, now: now))
            }
            return (actions, min(crossing, now + configuration.idlePoll))
        }
    }

    private func wakeWhileTracking(_ current: Tracking, now: UInt64) -> UInt64 {
        // Once the sample budget is spent, keep looking at the sample cadence only to notice the end.
        var wake = current.samples < configuration.maxSamples
            ? current.nextSampleAt : now + configuration.sampleInterval
        if !current.interimSent { wake = min(wake, current.since + configuration.interimAfter) }
        return max(wake, now + 1)
    }
}
