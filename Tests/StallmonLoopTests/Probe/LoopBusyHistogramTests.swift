@testable import StallmonLoop
import Testing

@Suite("Busy-time histogram")
struct LoopBusyHistogramTests {
    @Test("buckets are contiguous and increasing from 0 ns to 2^36 ns")
    func bucketsAreContiguous() {
        var previous: UInt64 = 0
        for index in 1..<LoopBusyHistogram.bucketCount {
            let lower = LoopBusyHistogram.lowerBound(ofBucket: index)
            #expect(lower > previous, "bucket \(index)")
            #expect(LoopBusyHistogram.bucket(of: lower) == index)
            #expect(LoopBusyHistogram.bucket(of: lower - 1) == index - 1)
            previous = lower
        }
        #expect(previous == 1 << 36)
        #expect(LoopBusyHistogram.bucket(of: .max) == LoopBusyHistogram.bucketCount - 1)
    }

    @Test("every busy time from 1 µs to 60 s reads back within 3.2 % (the ≤ 5 % goal)")
    func relativeError() {
        var value: UInt64 = 1_000
        var worst = 0.0
        while value <= 60_000_000_000 {
            let midpoint = LoopBusyHistogram.midpoint(ofBucket: LoopBusyHistogram.bucket(of: value))
            let error = abs(Double(midpoint) - Double(value)) / Double(value)
            worst = max(worst, error)
            value = value + value / 97 + 1  // steps that land everywhere inside the buckets
        }
        #expect(worst <= 0.0321, "worst relative error \(worst)")
    }

    @Test("percentiles of known durations come back within the bucket error")
    func percentiles() {
        let histogram = BusyHistogram()
        #expect(histogram.snapshot().percentile(0.5) == nil)
        // 900 iterations of 2 ms, 90 of 30 ms, 10 of 400 ms.
        for _ in 0..<900 { histogram.record(2_000_000) }
        for _ in 0..<90 { histogram.record(30_000_000) }
        for _ in 0..<10 { histogram.record(400_000_000) }
        let snapshot = histogram.snapshot()
        #expect(snapshot.count == 1000)
        func within(_ value: Duration?, _ expected: Double) -> Bool {
            guard let value else { return false }
            return abs(Double(value.nanosecondsClamped) - expected) / expected <= 0.032
        }
        #expect(within(snapshot.percentile(0.5), 2e6))
        #expect(within(snapshot.percentile(0.9), 2e6))
        #expect(within(snapshot.percentile(0.95), 30e6))
        #expect(within(snapshot.percentile(0.99), 30e6))
        #expect(within(snapshot.percentile(1), 400e6))
        let later = BusyHistogram()
        for _ in 0..<5 { later.record(2_000_000) }
        #expect(snapshot.subtracting(later.snapshot()).count == 995)
    }

    @Test("the probe counts every finished iteration and the busy time, the open one included")
    func probeCountsBusyTime() {
        let ms: UInt64 = 1_000_000
        let probe = LoopProbe(thresholdNanoseconds: 100 * ms)
        probe.passBegins(at: 0)
        probe.loopIdles(at: 3 * ms)        // 3 ms busy
        probe.loopWoke(at: 10 * ms)
        probe.loopIdles(at: 15 * ms)       // 5 ms busy
        probe.loopWoke(at: 20 * ms)        // open since 20 ms
        let reading = probe.busyTime(at: 26 * ms)
        #expect(reading.iterations == 2)
        #expect(reading.busyNanoseconds == 14 * ms)
        let histogram = probe.histogram.snapshot()
        #expect(histogram.count == 2)
        #expect(histogram.counts[LoopBusyHistogram.bucket(of: 3 * ms)] == 1)
        #expect(histogram.counts[LoopBusyHistogram.bucket(of: 5 * ms)] == 1)
    }
}
