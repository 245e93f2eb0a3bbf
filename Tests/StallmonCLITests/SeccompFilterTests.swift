import Foundation
import StallmonReport
import StallmonTestSupport
import Testing

/// A hardened systemd unit (`SystemCallFilter=@system-service`) filters process_vm_readv, which is in `@debug`, and
/// kills the caller by default. Before (issue 41, item 6): `stallmon demo` under such a filter died of SIGSYS at once,
/// with no report and no line of log; with EPERM it lived, but blamed the Swift runtime's layout. Now the monitor
/// probes in a child, never makes the call, reads its own memory through /proc/self/mem instead (await chains
/// remain), and says which unit line restores the call.
@Suite("a seccomp filter on process_vm_readv", .serialized)
struct SeccompFilterTests {
    /// `seccomp-launch kill|eperm PROGRAM ARGS…`: installs a filter on process_vm_readv with that action, then execs.
    static let launcherSource = #"""
        #include <errno.h>
        #include <linux/audit.h>
        #include <linux/filter.h>
        #include <linux/seccomp.h>
        #include <stddef.h>
        #include <stdio.h>
        #include <string.h>
        #include <sys/prctl.h>
        #include <sys/syscall.h>
        #include <unistd.h>

        int main(int argc, char **argv) {
            if (argc < 3) return 64;
            unsigned int action = strcmp(argv[1], "kill") == 0 ? SECCOMP_RET_KILL_PROCESS
                                                                : (SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA));
        #if defined(__x86_64__)
            const unsigned int arch = AUDIT_ARCH_X86_64;
        #elif defined(__aarch64__)
            const unsigned int arch = AUDIT_ARCH_AARCH64;
        #else
        #error "an architecture this launcher knows"
        #endif
            struct sock_filter filter[] = {
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, arch, 1, 0),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 0, 1),
                BPF_STMT(BPF_RET | BPF_K, action),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
            };
            struct sock_fprog program = {.len = sizeof filter / sizeof filter[0], .filter = filter};
            if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) { perror("no_new_privs"); return 70; }
            if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) { perror("seccomp"); return 70; }
            execv(argv[2], argv + 2);
            perror("execv");
            return 70;
        }
        """#

    static func buildLauncher(in directory: String) throws -> String {
        try CCompiler.build(launcherSource, named: "seccomp-launch", in: directory,
                            output: directory + "/seccomp-launch", flags: ["-O1"])
    }

    @Test("the demo under the filter lives, reports its stalls and names the filter", arguments: ["kill", "eperm"])
    func demoUnderAFilter(action: String) async throws {
        try await withTemporaryDirectory { temporary in
            let launcher = try Self.buildLauncher(in: temporary.path)
            let reports = temporary.path("reports")
            let output = temporary.path("output")
            let stallmon = try StallmonExecutable.url().path
            let child = try ChildProcess(launcher, [action, stallmon, "demo", "--seconds", "4", "--stalls",
                                                   "cpu,async", "--report-dir", reports],
                                         environment: StallmonExecutable.environment(), stdoutPath: output,
                                         stderrPath: output)
            let finished = await offThePoolWait(child, timeout: .seconds(60))
            let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
            try #require(finished, "the demo did not end: \(text)")
            #expect(child.terminatingSignal == nil, "killed by signal \(child.terminatingSignal ?? 0): \(text)")
            #expect(child.exitCode == 0, "\(text)")
            #expect(text.contains("a seccomp filter"), "\(text)")
            #expect(text.contains("process_vm_readv"), "\(text)")
            #expect(text.contains("SystemCallFilter=process_vm_readv"), "the unit line that restores it: \(text)")
            #expect(!text.contains("not where this build looks"), "the runtime's layout is not blamed: \(text)")
            let names = try FileManager.default.contentsOfDirectory(atPath: reports)
                .filter { $0.hasPrefix("stall-") && $0.hasSuffix(".json") }
            let stalls = try names.map { try ReportReader.read(reports + "/" + $0) }
            #expect(stalls.contains { $0.topFrame?.symbol.contains("crunchPrimes") == true }, "\(names)")
            let async = stalls.first { $0.topFrame?.symbol.contains("renderReportInTask") == true }
            #expect(async?.frames.contains { $0.async == true } == true, "the task's await chain, read without the call")
        }
    }

    /// Polls the child without holding a pool thread.
    func offThePoolWait(_ child: ChildProcess, timeout: Duration) async -> Bool {
        let deadline = ContinuousClock.now.advanced(by: timeout)
        while !child.poll() {
            if ContinuousClock.now >= deadline { return false }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return true
    }
}
