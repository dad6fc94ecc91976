#!/usr/bin/env bash
# The migration table: step time over fast-only for every policy, per model, fast budget and
# emulated preset, all policies of one cell side by side in one process (bench_training, steps
# alternating), median of STEPS steps after WARMUP (the profile and the plan's start among them).
# Prints a markdown table with each policy's penalty share: (policy - fast-only) / (slow-only -
# fast-only), and the floor no plan can beat (migrator::Plan::floor_slow_ns, or fast-only's step
# time where that is longer, over fast-only's step time).
# Every figure is on an emulated slow tier and names its preset.
# Then a second table: what each policy moved per step, dropped late, and its mover's CPU time.
# Usage: bench/migration_table.sh [BUILD_DIR]
# Environment: MODELS, BUDGETS, PRESETS, STEPS, WARMUP, BATCH, POLICIES; JSON_OUT=file keeps the
# measurements (tools/plot_migration.py draws them).
set -euo pipefail
BUILD=${1:-build/release}
MODELS=${MODELS:-resnet18 vgg11}
BUDGETS=${BUDGETS:-100% 50% 20% 10%}
PRESETS=${PRESETS:-optane-server}
POLICIES=${POLICIES:-fast-only slow-only first-touch interleave reactive reactive-2m autoswap sentinel oracle}
STEPS=${STEPS:-5}
WARMUP=${WARMUP:-3}
BATCH=${BATCH:-32}
if [ ! -x "$BUILD/bench/bench_training" ]; then
  echo "$0: $BUILD/bench/bench_training is missing: build it (cmake --build $BUILD --target bench_training)" >&2
  exit 2
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
policy_args=()
for p in $POLICIES; do policy_args+=(--policy "$p"); done
for preset in $PRESETS; do
  for model in $MODELS; do
    for budget in $BUDGETS; do
      echo "running $model, $preset, fast budget $budget ..." >&2
      "$BUILD/bench/bench_training" --model "$model" --batch "$BATCH" --steps "$STEPS" --warmup "$WARMUP" \
        --tiers "fast=dram:16GiB,slow=emulated:$preset:32GiB" "${policy_args[@]}" --fast-budget "$budget" |
        grep '^JSON' | sed "s/^JSON {/JSON {\"preset\": \"$preset\", \"budget\": \"$budget\", /" >> "$out"
    done
  done
done
/usr/bin/python3 - "$out" "$STEPS" "$WARMUP" "$BATCH" <<'PY'
import json, sys
rows = [json.loads(l.split(" ", 1)[1]) for l in open(sys.argv[1]) if l.startswith("JSON")]
steps, warmup, batch = sys.argv[2:]
print(f"batch {batch}, 3x32x32, width 64; each cell the median of {steps} steps after {warmup}; "
      "ratio to fast-only (penalty share: (policy - fast-only) / (slow-only - fast-only)); emulated slow tier")
policies = []
for r in rows:
    p = r["tiers"].split(" ", 1)[1] if " " in r["tiers"] else None
    if p and p not in policies:
        policies.append(p)
print("| model | preset | fast budget | fast-only ms | floor | " + " | ".join(p for p in policies if p != "fast-only") + " |")
print("| --- | --- | --- | --- | --- | " + " | ".join("---" for p in policies if p != "fast-only") + " |")
cells, floors = {}, {}
for r in rows:
    if " " not in r["tiers"]:
        continue
    key = (r["model"], r["preset"], r["budget"])
    cells.setdefault(key, {})[r["tiers"].split(" ", 1)[1]] = r["median_ms"]
    if r["tiers"].split(" ", 1)[1] not in ("fast-only", "slow-only"):
        floors[key] = max(floors.get(key, 0.0), r.get("floor_slow_ms", 0.0))
for (model, preset, budget), c in cells.items():
    f, s = c["fast-only"], c.get("slow-only")
    parts = []
    for p in policies:
        if p == "fast-only":
            continue
        v = c[p]
        share = f" ({(v - f) / (s - f):.2f})" if s and s > f and p != "slow-only" else ""
        parts.append(f"{v / f:.2f}x{share}")
    # The floor: the slow-tier time no plan avoids, or the step's compute (fast-only), the longer.
    floor = max(f, floors.get((model, preset, budget), 0.0)) / f
    print(f"| {model} | {preset} | {budget} | {f:.0f} | {floor:.2f}x | " + " | ".join(parts) + " |")
print()
print("Per step (mean over the steps the policy ran): MiB moved in / out, moves dropped late, mover CPU ms")
print("| model | preset | fast budget | " + " | ".join(p for p in policies if p not in ("fast-only", "slow-only")) + " |")
print("| --- | --- | --- | " + " | ".join("---" for p in policies if p not in ("fast-only", "slow-only")) + " |")
moved = {}
for r in rows:
    if " " not in r["tiers"]:
        continue
    moved.setdefault((r["model"], r["preset"], r["budget"]), {})[r["tiers"].split(" ", 1)[1]] = r
for (model, preset, budget), c in moved.items():
    parts = []
    for p in policies:
        if p in ("fast-only", "slow-only"):
            continue
        r = c[p]
        parts.append(f"{r.get('in_mib', 0):.0f} / {r.get('out_mib', 0):.0f}, {r.get('late_dropped', 0):.0f}, "
                     f"{r.get('mover_cpu_ms', 0):.0f}")
    print(f"| {model} | {preset} | {budget} | " + " | ".join(parts) + " |")
PY
if [ -n "${JSON_OUT:-}" ]; then cp "$out" "$JSON_OUT"; echo "measurements kept in $JSON_OUT" >&2; fi
