import StallmonReport

/// What one probe source alone knows of a stall, written into the stall's report by that source's own code, the way
/// each of KSCrash's monitors writes its own section of a crash report. The report builder makes what every stall
/// has (samples, frames, class, signature, the thread's figures); then each section of the stall's snapshot adds
/// its part: an event loop's phase (StallmonNIO), a starved pool's verdict and culprits (`StarvationSection`). The
/// writer knows no source: it builds, lets the sections write, and writes.
package protocol StallSection: Sendable {
    /// Adds this section to `report`, just built from the stall's samples by `builder`, which also symbolicates
    /// what the section holds of its own (a starvation's culprits). On the writer thread.
    func write(into report: inout StallReport, builder: ReportBuilder)

    /// The family of the stall's event lines: `stall` (`stall.begin`, …, `stall.end`) unless a section names
    /// another (`starvation`).
    var eventFamily: String? { get }
}

extension StallSection {
    package var eventFamily: String? { nil }
}
