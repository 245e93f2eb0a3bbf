// `stallmon upload --daemon` (and `stallmon demo`, whose loop stops on them) must exit 0 on SIGTERM at any moment,
// also while it is still starting: the shared
// libraries' initializers (Foundation, ICU, the Swift runtime), argument parsing and the configuration take ~10 ms,
// during which the default action of SIGTERM would kill it. A function in the executable's .preinit_array runs
// before all of them (glibc runs it before any shared object's initializer): it blocks the two signals for the whole
// process (threads created later inherit the mask), and the daemon takes them with sigwait once it is ready. Only
// the kernel's exec and the dynamic loader's mapping (~1 ms) come before it.
#ifndef _GNU_SOURCE
#error You must define _GNU_SOURCE (Package.swift does)
#endif
#include "CStallmonCLI.h"

#include <signal.h>
#include <string.h>

static int g_stop_signals_blocked;

// NOT async-signal-safe; runs once, before any initializer, on the only thread.
static void block_stop_signals_for_the_daemon(int argc, char **argv, char **envp) {
    (void)envp;
    int upload = 0, daemon = 0, demo = 0;
    for (int i = 1; i < argc && argv[i] != NULL; i++) {
        if (strcmp(argv[i], "upload") == 0) upload = 1;
        if (strcmp(argv[i], "--daemon") == 0) daemon = 1;
        if (i == 1 && strcmp(argv[i], "demo") == 0) demo = 1;  // its loop takes them through a signalfd
    }
    if (!(upload && daemon) && !demo) return;
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    if (sigprocmask(SIG_BLOCK, &stop, NULL) == 0) g_stop_signals_blocked = 1;
}

// In the executable only (the CLI target is linked into it): glibc calls .preinit_array entries with argc, argv, envp.
__attribute__((section(".preinit_array"), used)) static void (*const preinit_block_stop_signals)(int, char **, char **) =
    block_stop_signals_for_the_daemon;

int cstallmon_cli_stop_signals_blocked(void) { return g_stop_signals_blocked; }

int cstallmon_cli_wait_for_stop_signal(void) {
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    int received = 0;
    while (sigwait(&stop, &received) != 0) {
    }
    return received;
}
