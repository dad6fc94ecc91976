#!/usr/bin/env bash
# Builds tensortier's libFuzzer targets (tests/fuzz, with clang) and runs each for SECONDS
# (default 30) on its seed corpus (tests/fuzz/corpus/<target>, read only: what a run finds goes
# to a temporary corpus). Exit status 0 iff no target found a crash, a leak, UB or a timeout.
# Usage: tools/fuzz.sh [SECONDS]     (tools/setup.sh fuzz installs clang and libFuzzer)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
build=build/fuzz
cmake -S tests/fuzz -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
for target in tier_spec idx_header bandwidth_cache; do
  mkdir -p "$work/$target"
  if "$build/fuzz_$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=0 \
      -artifact_prefix="$work/" "$work/$target" "tests/fuzz/corpus/$target" >"$work/$target.log" 2>&1; then
    echo "fuzz $target: nothing found in ${seconds}s ($(grep -oE '#[0-9]+' "$work/$target.log" | tail -1 | tr -d '#') runs)"
  else
    echo "fuzz $target: FOUND A PROBLEM; its log ends:"
    tail -30 "$work/$target.log"
    ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* 2>/dev/null | while read -r f; do
      echo "input $f:"; od -c "$f" | head -10
    done
    failed=$((failed + 1))
  fi
done
[[ $failed -eq 0 ]]
