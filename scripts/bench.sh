#!/usr/bin/env bash
# Benchmarks behind README "Performance": builds in release mode, prints a table, writes the figures as JSON
# (default bench-results.json; override with BENCH_OUTPUT=path). Peers measured in the same run: eu-stack (elfutils)
# and gdb attaching to a stalled process, and a heartbeat-probe detector (the method of ANR-WatchDog and Sentry's
# first app-hang tracker). Extra arguments go to stallmon-bench (e.g. --quick, --sections loop,capture). Section
# pool-width needs root and a writable /sys/fs/cgroup/cpu (cgroup v1); it says so and is skipped otherwise.
# No figure is asserted: this measures, the tests check behaviour.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

missing=()
command -v eu-stack >/dev/null || missing+=(elfutils)
command -v gdb >/dev/null || missing+=(gdb)
command -v addr2line >/dev/null || missing+=(binutils)
command -v wrk >/dev/null || missing+=(wrk)
if ((${#missing[@]} > 0)); then
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    echo "bench: installing ${missing[*]}" >&2
    $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

swift build -c release --product stallmon
swift build -c release --product stallmon-bench
# Section 8c's Hummingbird 2 service (a package of its own under Tests/).
swift build -c release --package-path Tests/HummingbirdService --scratch-path .build-hb --product hb-stall-service
exec .build/release/stallmon-bench run --output "${BENCH_OUTPUT:-bench-results.json}" \
    --stallmon .build/release/stallmon --receiver Tests/StallmonTestSupport/receiver.py "$@"
