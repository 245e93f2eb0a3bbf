// The Looper runs on epoll and eventfd: Linux only. The monitor (Stallmon) says the same for its own needs.
// Fail at compile time, with a reason, rather than with missing C symbols.
#if !os(Linux)
#error("stallmon runs on Linux only (epoll, tgkill, /proc, libunwind); see README, \"The two commands\"")
#endif
