#!/usr/bin/env bash
# Builds the DocC catalogs (Sources/<Target>/Documentation.docc) with warnings as errors, so a broken symbol or
# article link fails the tests (scripts/test.sh runs this). Output: .build/docs/<Target> (a static site).
# Needs the toolchain's `docc`; the symbol graphs come from SwiftPM's own dump-symbol-graph (no plugin dependency).
set -euo pipefail
cd "$(dirname "$0")/.."

swift package dump-symbol-graph --minimum-access-level public >/dev/null
graphs="$(find .build -maxdepth 3 -type d -name symbolgraph -path '*-unknown-linux-gnu/*' | head -n 1)"
[ -n "$graphs" ] || { echo "docs: no symbol graphs under .build" >&2; exit 1; }

for catalog in Sources/*/Documentation.docc; do
    target="$(basename "$(dirname "$catalog")")"
    module_graphs=".build/docs/symbolgraph/$target"
    rm -rf "$module_graphs" && mkdir -p "$module_graphs"
    cp "$graphs/$target.symbols.json" "$module_graphs/"
    find "$graphs" -maxdepth 1 -name "$target@*.symbols.json" -exec cp {} "$module_graphs/" \;
    docc convert "$catalog" --additional-symbol-graph-dir "$module_graphs" --output-path ".build/docs/$target" \
        --fallback-display-name "$target" --fallback-bundle-identifier "stallmon.$target" --warnings-as-errors
    echo "docs: $target built (.build/docs/$target)"
done
