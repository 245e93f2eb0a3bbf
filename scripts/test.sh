#!/usr/bin/env bash
# Runs the whole test suite (unit, end-to-end monitor and CLI tests). Used by CI (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

# Tools the tests drive: headless Chromium renders the HTML report, binutils (addr2line, objcopy, strip) checks and
# splits symbols, a C compiler builds the shared library of the dlopen fault test and the seccomp launcher, strace
# counts the fsyncs of durable writes, `go tool pprof` (golang-go) and protoc (protobuf-compiler) read the pprof
# profiles `stallmon report --pprof` writes.
tools=()
command -v chromium >/dev/null || tools+=(chromium)
command -v addr2line >/dev/null && command -v objcopy >/dev/null || tools+=(binutils)
command -v cc >/dev/null || tools+=(gcc)
command -v strace >/dev/null || tools+=(strace)
command -v go >/dev/null || tools+=(golang-go)
command -v protoc >/dev/null || tools+=(protobuf-compiler)
if ((${#tools[@]} > 0)); then
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    echo "test: installing ${tools[*]}" >&2
    $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${tools[@]}" >/dev/null
fi

# The upload tests decode OTLP payloads with the official opentelemetry-proto package, served to them by a
# Python receiver on 127.0.0.1.
if ! python3 -c "import opentelemetry.proto.collector.logs.v1.logs_service_pb2" 2>/dev/null; then
    echo "test: installing opentelemetry-proto (pip)" >&2
    if ! python3 -m pip --version >/dev/null 2>&1; then
        sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
        $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-pip >/dev/null
    fi
    python3 -m pip install --quiet --disable-pip-version-check opentelemetry-proto 2>/dev/null \
        || python3 -m pip install --quiet --disable-pip-version-check --break-system-packages opentelemetry-proto
fi
swift build --build-tests
# The documentation builds with warnings as errors: a broken symbol or article link fails here.
bash scripts/docs.sh
# The real Hummingbird 2 service HummingbirdServiceTests drives: a package of its own under Tests/, so the stallmon
# package never depends on Hummingbird. Built here, and required: the tests fail rather than skip without it.
# SwiftPM keeps its build plan (debug.yaml) across runs and does not see a source file added to a path dependency
# (stallmon itself) since: removing the plan makes it plan again, with the files as they are now.
rm -f .build-hb/debug.yaml
swift build --package-path Tests/HummingbirdService --scratch-path .build-hb --product hb-stall-service
export REQUIRE_HUMMINGBIRD_SERVICE=1
# The real Vapor 4 service VaporServiceTests drives, the same way (its first build takes about 5 minutes).
rm -f .build-vapor/debug.yaml
swift build --package-path Tests/VaporService --scratch-path .build-vapor --product vapor-stall-service
export REQUIRE_VAPOR_SERVICE=1
# The async fixture once more with the Swift runtime linked in (--static-swift-stdlib), as Vapor's and Hummingbird's
# Dockerfiles build: the global executor's hooks must be found where dlsym finds nothing.
swift build --static-swift-stdlib --product stallmon-async-fixture --scratch-path .build-static
export REQUIRE_STATIC_FIXTURE=1
# The tests that act as another user or mount file systems are disabled without root (reported as skipped); as root
# or in CI they are required, and RequiredEnvironmentTests fails if what they need is missing.
if [ "$(id -u)" -eq 0 ] || [ "${CI:-}" = "true" ]; then export REQUIRE_PRIVILEGED_TESTS=1; fi
# A bound on the run: a test that deadlocks must fail here with the evidence (every thread's stack), not run into CI's
# own time limit with nothing to show. The whole suite takes under 3 minutes here once built.
limit="${TEST_TIME_LIMIT_SECONDS:-1500}"
swift test --skip-build "$@" &
tests=$!
(
    # Polls rather than one long sleep: it ends within a second of the tests, holding no output open after them.
    for ((waited = 0; waited < limit; waited++)); do
        sleep 1
        kill -0 "$tests" 2>/dev/null || exit 0
    done
    printf "\n" >&2
    echo "test: the tests still run after $limit s (a hang): every thread of the test process, then killed" >&2
    for pid in $(pgrep -f 'PackageTests.xctest'); do
        if command -v gdb >/dev/null; then
            gdb -p "$pid" -batch -ex 'thread apply all bt 16' 2>/dev/null | grep -E '^(Thread|#)' >&2 || true
        fi
        # Where each thread waits, even where gdb may not attach (ptrace restricted).
        for task in /proc/"$pid"/task/*; do
            echo "thread ${task##*/} $(cat "$task"/comm 2>/dev/null) in $(cat "$task"/wchan 2>/dev/null)" >&2 || true
        done
        kill -9 "$pid" 2>/dev/null || true
    done
) &
watchdog=$!
status=0
wait "$tests" || status=$?
wait "$watchdog" || true
exit "$status"
