#if !os(Linux)
#error("StallmonNIO runs on Linux only: it times SwiftNIO's epoll-based event loops (README, \"SwiftNIO event loops\").")
#endif
