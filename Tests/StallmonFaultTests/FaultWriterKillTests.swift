import Foundation
@testable import Stallmon
import StallmonLoop
@testable import StallmonReport
import StallmonTestSupport
@testable import StallmonUpload
import Testing

#if canImport(Glibc)
import Glibc
#endif

extension FaultTests {
    /// `stallmon demo` processes SIGKILLed at random moments, 100 kills, all writing into one report directory with
    /// the spool on. Whatever moment a process died at, what it left must be whole: every report parses, temporary
    /// files are never taken for reports, every complete event-log line parses, and the spool lists only complete
    /// reports.
    @Suite("Fault: the writer killed mid-report", .serialized)
    struct FaultWriterKillTests {
        static let kills = 100
        /// Processes alive at once, each in its own "lane" (the machine has 2 cores; the demo mostly sleeps).
        static let lanes = 5

        /// Names in `directory` via readdir: cheap enough to poll every millisecond.
        static func names(in directory: String) -> [String] {
            guard let handle = opendir(directory) else { return [] }
            defer { closedir(handle) }
            var names: [String] = []
            while let entry = readdir(handle) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                    String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
                }
                if name != "." && name != ".." { names.append(name) }
            }
            return names
        }

        struct Run {
            var child: ChildProcess
            var startedAt: UInt64
            /// Kill at this time at the latest.
            var killAt: UInt64
            /// Kill as soon as one of this process's temporary report files shows up (mid-write).
            var killOnWrite: Bool
            /// When one of its temporary report files was first seen.
            var sawWrite: UInt64?
        }

        @Test func faultHundredSigkillsLeaveOnlyWholeReportsSpoolEntriesAndEventLines() throws {
            let executable = try StallmonExecutable.url().path
            let root = makeTemporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: root) }
            let directory = root + "/reports"
            let spool = Spool(reportDirectory: directory)
            // Threshold 30 ms and interim reports after 90 ms: the 150 ms cpu stall (the first, ~0.5 s after the loop
            // starts) gets an interim report, then the final one renamed over it and re-linked into the spool: more
            // writes per run to be killed in. (STALLMON_THRESHOLD_MS only makes the loaded configuration valid;
            // --threshold-ms is what the demo uses.)
            let arguments = ["demo", "--seconds", "3", "--stalls", "cpu,json", "--threshold-ms", "30",
                             "--report-dir", directory]
            let environment = StallmonExecutable.environment([
                "STALLMON_SPOOL": "on", "STALLMON_THRESHOLD_MS": "30", "STALLMON_INTERIM_AFTER_MS": "90",
            ])
            var random = SeededRandom(seed: 0x5EED_0F_4B11)
            var running: [Run] = []
            var started = 0
            var killedPids: [pid_t] = []
            var killedOnWrite = 0
            var earlyExits: [String] = []
            var killDelays: [Double] = []
            let begin = faultNow()
            let hardStop = begin + 150_000_000_000  // never more than 150 s, whatever happens

            while killedPids.count + earlyExits.count < Self.kills && faultNow() < hardStop {
                while running.count < Self.lanes && started < Self.kills {
                    let onWrite = random.chance(60)
                    // Uniform kills cover start-up, monitor start, the first stall and the idle time after it. Kills
                    // on write wait for the first temporary report file (~0.9 s in, later on a loaded machine); if
                    // none was seen they fall back to a moment after the first report, up to the second stall.
                    let delayMs = onWrite ? random.between(1200...2600) : random.between(30...1200)
                    let child = try ChildProcess(executable, arguments, environment: environment)
                    let now = faultNow()
                    running.append(Run(child: child, startedAt: now, killAt: now + UInt64(delayMs) * 1_000_000,
                                       killOnWrite: onWrite, sawWrite: nil))
                    started += 1
                }
                let temporaries = (Self.names(in: directory) + Self.names(in: spool.pendingDirectory))
                    .filter { $0.hasPrefix(".tmp-") }
                let now = faultNow()
                var remaining: [Run] = []
                for var run in running {
                    if run.child.poll() {
                        earlyExits.append("pid \(run.child.pid): exit \(String(describing: run.child.exitCode)), "
                            + "signal \(String(describing: run.child.terminatingSignal))")
                        continue
                    }
                    if run.killOnWrite && run.sawWrite == nil
                        && temporaries.contains(where: { $0.contains("-\(run.child.pid)-") }) {
                        // Mid-write: kill now, or a few ms later (fsync, rename, the spool link, the next write).
                        run.sawWrite = now
                        run.killAt = min(run.killAt, now + UInt64(random.pick([0, 0, 1, 3, 8, 15, 25])) * 1_000_000)
                    }
                    guard now >= run.killAt else {
                        remaining.append(run)
                        continue
                    }
                    #expect(run.child.kill(), "pid \(run.child.pid) died after SIGKILL")
                    #expect(run.child.terminatingSignal == SIGKILL, "pid \(run.child.pid) was killed, not crashed")
                    killedPids.append(run.child.pid)
                    killDelays.append(Double(now - run.startedAt) / 1e6)
                    if run.sawWrite != nil { killedOnWrite += 1 }
                }
                running = remaining
                usleep(1_000)
            }
            for run in running { run.child.kill() }
            let elapsed = faultMilliseconds(since: begin)
            #expect(earlyExits.isEmpty, "no demo exited by itself before its kill: \(earlyExits)")
            #expect(killedPids.count == Self.kills, "\(Self.kills) processes were killed (\(killedPids.count))")

            // 1. Every report parses; temporary files are not reports.
            let listing = faultListing(directory)
            let temporaryReports = listing.filter { $0.hasPrefix(".tmp-") }
            let scan = try ReportReader.scan(directory: directory)
            #expect(scan.problems.isEmpty, "no torn or partial report: \(scan.problems.map(\.description))")
            for name in listing where name.hasPrefix("stall-") {
                #expect(name.hasSuffix(".json"), "only complete report names: \(name)")
                #expect(throws: Never.self) { _ = try ReportReader.read(directory + "/" + name) }
            }
            for temporary in temporaryReports {
                #expect(!scan.problems.contains { $0.path.hasSuffix(temporary) }, "\(temporary) is no problem")
                #expect(!scan.reports.contains { $0.path.hasSuffix(temporary) }, "\(temporary) is no report")
            }
            let reportIDs = Set(scan.reports.map(\.report.id))
            let pidsWithReports = Set(scan.reports.map(\.report.process.pid))
            let killedAfterAReport = killedPids.filter { pidsWithReports.contains($0) }.count
            let killedBeforeAnyReport = killedPids.count - killedAfterAReport
            let ongoing = scan.reports.filter(\.report.ongoing).count

            // 2. Every complete line of the event log parses; only an unterminated tail may be partial.
            let (lines, tail) = faultCompleteLines(directory + "/events.jsonl")
            var events: [StallEvent] = []
            for (number, line) in lines.enumerated() {
                do {
                    events.append(try JSONDecoder().decode(StallEvent.self, from: Data(line.utf8)))
                } catch {
                    Issue.record("events.jsonl line \(number + 1) is not a whole event: \(line.prefix(200))")
                }
            }
            let begun = Set(events.filter { $0.event == "stall.begin" }.compactMap(\.id))
            let interruptedStalls = begun.subtracting(reportIDs).count

            // 3. The spool: leftovers of interrupted enqueues are cleaned by pending(); what it lists is complete.
            let spoolTemporaries = faultListing(spool.pendingDirectory).filter { $0.hasPrefix(".tmp-") }.count
            let pending = try spool.pending()
            // Leftovers are swept once older than a minute (never a live enqueue's): age them, and they go. A spool
            // link's temporary carries its creation time in its name (a link keeps the report's mtime): older names.
            for name in faultListing(spool.pendingDirectory) where name.hasPrefix(".tmp-") {
                let path = spool.pendingDirectory + "/" + name
                var times = [timespec(tv_sec: time(nil) - 120, tv_nsec: 0), timespec(tv_sec: time(nil) - 120, tv_nsec: 0)]
                _ = utimensat(AT_FDCWD, path, &times, 0)
                if let created = AtomicFile.creationTime(ofTemporary: name) {
                    let older = name.replacingOccurrences(of: "-t\(created)-", with: "-t\(created - 120)-")
                    _ = rename(path, spool.pendingDirectory + "/" + older)
                }
            }
            _ = try spool.pending()
            #expect(!faultListing(spool.pendingDirectory).contains { $0.hasPrefix(".tmp-") },
                    "pending() removed the old temporary links of interrupted enqueues")
            for entry in pending {
                #expect(!entry.name.hasPrefix(".tmp-"))
                // Spooled before published: a process killed in between leaves the report's durable temporary file
                // in the directory instead of the report (the next start's UploadSink puts it back).
                let beingPublished = listing.contains { $0.hasPrefix(".tmp-\(entry.name)-") }
                do {
                    let report = try ReportReader.read(spool.pendingDirectory + "/" + entry.name)
                    #expect(reportIDs.contains(report.id) || beingPublished,
                            "the spooled \(entry.name) is a report of the directory, or was being published")
                } catch {
                    Issue.record("spooled entry \(entry.name) is not a complete report: \(error)")
                }
                #expect(listing.contains(entry.name) || beingPublished,
                        "a spool entry links a report that exists or was being published: \(entry.name)")
            }
            let unspooled = Set(scan.reports.map { ($0.path as NSString).lastPathComponent })
                .subtracting(pending.map(\.name)).count
            // Nothing is delivered in this test, so every report visible in the directory must still be pending.
            #expect(unspooled == 0, "every published report is in the spool (\(unspooled) are not)")

            print("Fault writer-kill: \(killedPids.count) kills in \(String(format: "%.1f", elapsed / 1000)) s "
                + "(delays \(String(format: "%.0f", killDelays.min() ?? 0))–\(String(format: "%.0f", killDelays.max() ?? 0)) ms, "
                + "\(killedOnWrite) at 0–25 ms after sight of a temporary report file); "
                + "\(scan.reports.count) reports (\(ongoing) interim) from \(pidsWithReports.count) processes; "
                + "\(killedBeforeAnyReport) killed before writing any report, \(killedAfterAReport) after; "
                + "\(interruptedStalls) stalls begun but never reported; "
                + "\(temporaryReports.count) temporary report files and \(spoolTemporaries) temporary spool links left; "
                + "\(pending.count) spooled, \(unspooled) reports not spooled; "
                + "\(events.count) event lines, unterminated tail \(tail) bytes")

            // The kills were spread: some before anything was written, some after, and some in the middle of it.
            #expect(scan.reports.count >= 10, "the processes got far enough to write reports")
            #expect(killedBeforeAnyReport >= 5 && killedAfterAReport >= 5,
                    "kills before and after the first report: \(killedBeforeAnyReport) / \(killedAfterAReport)")
            #expect(killedOnWrite + interruptedStalls + temporaryReports.count + spoolTemporaries >= 1,
                    "at least one kill landed while a stall was being reported")
        }
    }
}
