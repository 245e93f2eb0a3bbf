// `stallmon upload --daemon` must exit 0 on SIGTERM at any moment, also while it is still starting (dynamic
// loading, the Swift runtime, argument parsing and the configuration take milliseconds, during which the default
// action of SIGTERM would kill it). A constructor runs before all of that: it blocks the two signals for the whole
// process (threads created later inherit the mask), and the daemon takes them with sigwait once it is ready.
#ifndef _GNU_SOURCE
#error You must define _GNU_SOURCE (Package.swift does)
#endif
#include "CStallmonCLI.h"

#include <signal.h>
#include <string.h>

static int g_stop_signals_blocked;

// NOT async-signal-safe; runs once, before main, on the only thread.
__attribute__((constructor)) static void block_stop_signals_for_the_daemon(int argc, char **argv, char **envp) {
    (void)envp;
    int upload = 0, daemon = 0;
    for (int i = 1; i < argc && argv[i] != NULL; i++) {
        if (strcmp(argv[i], "upload") == 0) upload = 1;
        if (strcmp(argv[i], "--daemon") == 0) daemon = 1;
    }
    if (!upload || !daemon) return;
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    if (sigprocmask(SIG_BLOCK, &stop, NULL) == 0) g_stop_signals_blocked = 1;
}

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
