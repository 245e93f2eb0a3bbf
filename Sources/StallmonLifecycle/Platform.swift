#if !os(Linux)
#error("StallmonLifecycle runs on Linux only: the monitors it runs are Linux's (see Sources/Stallmon/Monitor/Platform.swift).")
#endif
