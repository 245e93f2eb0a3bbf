// What the stallmon CLI must do before Swift's main runs. Linux only.
#ifndef CSTALLMON_CLI_H
#define CSTALLMON_CLI_H

/// 1 when the process was started as `stallmon upload … --daemon`: SIGTERM and SIGINT were blocked before any
/// initializer ran (.preinit_array), so a stop request that arrives during start-up stays pending (for sigwait) instead of
/// killing the process by its default action. NOT async-signal-safe concerns: reads a flag set once at start.
int cstallmon_cli_stop_signals_blocked(void);

/// Waits for SIGTERM or SIGINT (blocked by the constructor) and returns the signal number. Blocks the calling
/// thread; NOT async-signal-safe (not for handlers).
int cstallmon_cli_wait_for_stop_signal(void);

#endif
