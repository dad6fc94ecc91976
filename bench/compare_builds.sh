#!/usr/bin/env bash
# Side by side: the training step time of two builds of tensortier (for example the commit before a
# change and the change), each through the runtime and with plain allocation (bench_training), in
# ROUNDS rounds that alternate the two processes; the table shows the median of the rounds and the
# ratios. Use it to check that a change to the runtime's per-layer path costs no step time.
# Usage: bench/compare_builds.sh BEFORE_BUILD_DIR AFTER_BUILD_DIR
# Environment: MODELS, ROUNDS, STEPS, WARMUP, BATCH, TIERS (the runtime mode's tier spec)
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 BEFORE_BUILD_DIR AFTER_BUILD_DIR (each with bench/bench_training built)" >&2
  exit 2
fi
BEFORE=$1
AFTER=$2
for build in "$BEFORE" "$AFTER"; do
  if [ ! -x "$build/bench/bench_training" ]; then
    echo "$0: $build/bench/bench_training is missing: build it (cmake --build $build --target bench_training)" >&2
    exit 2
  fi
done
MODELS=${MODELS:-resnet18 vgg11}
ROUNDS=${ROUNDS:-5}
STEPS=${STEPS:-8}
WARMUP=${WARMUP:-2}
BATCH=${BATCH:-32}
TIERS=${TIERS:-fast=dram:8GiB}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for model in $MODELS; do
  for round in $(seq "$ROUNDS"); do
    for side in before after; do
      build=$BEFORE
      [ "$side" = after ] && build=$AFTER
      "$build/bench/bench_training" --model "$model" --batch "$BATCH" --steps "$STEPS" --warmup "$WARMUP" \
        --tiers "$TIERS" | grep '^JSON' | sed "s/^JSON {/JSON {\"side\": \"$side\", /" >> "$out"
    done
  done
done
/usr/bin/python3 - "$out" "$ROUNDS" "$STEPS" "$WARMUP" "$BATCH" "$TIERS" <<'PY'
import json, statistics, sys
rows = [json.loads(l.split(" ", 1)[1]) for l in open(sys.argv[1]) if l.startswith("JSON")]
rounds, steps, warmup, batch, tiers = sys.argv[2:]
print(f"batch {batch}, 32x32x3, tiers {tiers}; median of {rounds} rounds, each the median of {steps} steps after {warmup}")
print("| model | before: runtime ms | before: plain ms | after: runtime ms | after: plain ms | after / before (runtime) | runtime / plain (before) | runtime / plain (after) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for model in dict.fromkeys(r["model"] for r in rows):
    m = {}
    for side in ("before", "after"):
        for mode in ("runtime", "plain"):
            m[side, mode] = statistics.median(r["median_ms"] for r in rows
                                              if r["model"] == model and r["side"] == side and r["mode"] == mode)
    print(f"| {model} | {m['before','runtime']:.1f} | {m['before','plain']:.1f} | {m['after','runtime']:.1f} | "
          f"{m['after','plain']:.1f} | {m['after','runtime'] / m['before','runtime']:.3f} | "
          f"{m['before','runtime'] / m['before','plain']:.3f} | {m['after','runtime'] / m['after','plain']:.3f} |")
PY
