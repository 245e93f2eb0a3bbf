// stallmon samples threads with a real-time signal and tgkill, unwinds with libunwind, reads /proc/self/task and
// runs its loop on epoll: Linux only. Fail at compile time, with a reason, rather than with missing C symbols.
#if !os(Linux)
#error("stallmon runs on Linux only (epoll, tgkill, /proc, libunwind); see README, \"The two commands\"")
#endif
