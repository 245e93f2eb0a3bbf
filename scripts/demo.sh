#!/usr/bin/env bash
# The main job: build stallmon and run its demo service, which stalls for real and writes reports to
# ./stallmon-demo (override with --report-dir). Extra arguments go to `stallmon demo` (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
swift build --product stallmon
exec .build/debug/stallmon demo "$@"
