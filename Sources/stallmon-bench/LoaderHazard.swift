import ArgumentParser
import CStallmonCapture
import CStallmonLoopShims
import Foundation
import Stallmon
import Synchronization

/// A child process that builds the hazard of unwinding through the loader and reports whether captures survive it:
/// thread A holds a mutex and computes; thread B, inside a `dl_iterate_phdr` callback (holding the loader's list
/// lock), waits for that mutex; the watchdog side captures A (a thread without warm-up, so every frame is looked
/// up). Through the loader, A's handler waits for the list lock while B waits for A: both hang for good, so the
/// parent runs this in a child and kills it. Prints one line: `captures N ok M; holder progress P → Q`.
struct LoaderHazard: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "loader-hazard", shouldDisplay: false)

    @Flag(help: "Unwind through the loader (dl_iterate_phdr), as before the image table.")
    var throughLoader = false

    @Option(help: "Captures to take.")
    var captures = 300

    func run() throws {
        let signal = try SamplingSignal.default.resolve()
        var message = [CChar](repeating: 0, count: 256)
        guard cstallmon_install(signal, &message, message.count) == 0 else { throw ValidationError("install failed") }
        cstallmon_set_unwind_through_loader(throughLoader ? 1 : 0)
        let lock = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        pthread_mutex_init(lock, nil)
        let address = UInt(bitPattern: lock)
        let progress = Atomic<Int>(0)
        let holderTid = Atomic<Int32>(0)
        Thread.detachNewThread {
            holderTid.store(cstallmon_gettid(), ordering: .releasing)
            let lock = UnsafeMutablePointer<pthread_mutex_t>(bitPattern: address)!
            while true {
                pthread_mutex_lock(lock)
                _ = benchSpin(microseconds: 300)
                pthread_mutex_unlock(lock)
                progress.wrappingAdd(1, ordering: .relaxed)
            }
        }
        Thread.detachNewThread {
            typealias Callback = @convention(c) (OpaquePointer?, Int, UnsafeMutableRawPointer?) -> Int32
            typealias IteratePhdr = @convention(c) (Callback, UnsafeMutableRawPointer?) -> Int32
            let iterate = unsafeBitCast(dlsym(nil, "dl_iterate_phdr"), to: IteratePhdr.self)
            while true {
                _ = iterate({ _, _, context in
                    let lock = context!.assumingMemoryBound(to: pthread_mutex_t.self)
                    pthread_mutex_lock(lock)  // holding the loader's list lock
                    pthread_mutex_unlock(lock)
                    return 1
                }, UnsafeMutableRawPointer(bitPattern: address))
            }
        }
        while holderTid.load(ordering: .acquiring) == 0 { usleep(1000) }
        let slot = cstallmon_slot_acquire(holderTid.load(ordering: .acquiring))
        let capturer = StackCapturerForBench(slot: slot)
        var ok = 0
        for _ in 0..<captures {
            if capturer.capture().frames > 0 { ok += 1 }
            usleep(300)
        }
        let before = progress.load(ordering: .relaxed)
        usleep(500_000)
        let after = progress.load(ordering: .relaxed)
        FileHandle.standardOutput.write(Data("captures \(captures) ok \(ok); holder progress \(before) → \(after)\n".utf8))
        _exit(0)  // the two threads may be stuck for good: leave without waiting for anything
    }
}

@inline(never)
func benchSpin(microseconds: Int) -> UInt64 {
    let end = nowNanoseconds() + UInt64(microseconds) * 1000
    var accumulator: UInt64 = 1
    while nowNanoseconds() < end { accumulator = accumulator &* 6364136223846793005 &+ 1 }
    return accumulator
}
