#!/usr/bin/env bash
# Runs the whole test suite (unit, end-to-end monitor and CLI tests). Used by CI (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
swift build --build-tests
swift test --skip-build "$@"
