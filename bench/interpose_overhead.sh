#!/usr/bin/env bash
# The interposer's cost on a oneDNN program, side by side (issue 39's target: at most 2% of the
# step time with fast-only): plain_cnn's median training step, alternating ROUNDS times between
#   plain      the program alone (glibc malloc: its large buffers mapped and unmapped each step)
#   kept       the program alone with glibc told to keep freed memory (no fault per step), which
#              isolates what the interposer adds from what reusing memory saves
#   interposed tensortier-run --policy fast-only on two tiers (every memory an object, every
#              execution a layer of a found step)
# and prints each one's median of medians and the ratios.
#
# Usage: bench/interpose_overhead.sh BUILD_DIR   (ROUNDS=5, ARGS="--batch 64 --train 3200 --epochs 2")
set -euo pipefail
build=${1:?usage: bench/interpose_overhead.sh BUILD_DIR}
rounds=${ROUNDS:-5}
args=${ARGS:---batch 64 --train 3200 --epochs 2}
program="$build/interpose/plain_cnn"
run="$build/interpose/tensortier-run"
tiers="fast=dram:4GiB,slow=emulated:optane:8GiB"
keep="glibc.malloc.mmap_threshold=4294967296:glibc.malloc.trim_threshold=4294967296"
median_of() { sed -n 's/.*median step \([0-9.]*\) ms.*/\1/p'; }
declare -A times=([plain]="" [kept]="" [interposed]="")
for ((r = 1; r <= rounds; r++)); do
  # shellcheck disable=SC2086
  times[plain]+=" $("$program" $args 2>&1 >/dev/null | median_of)"
  # shellcheck disable=SC2086
  times[kept]+=" $(GLIBC_TUNABLES=$keep "$program" $args 2>&1 >/dev/null | median_of)"
  # shellcheck disable=SC2086
  times[interposed]+=" $("$run" --tiers "$tiers" --policy fast-only -- "$program" $args 2>&1 >/dev/null | median_of)"
done
python3 - "${times[plain]}" "${times[kept]}" "${times[interposed]}" "$rounds" "$args" <<'PY'
import statistics, sys
plain, kept, inter = ([float(x) for x in a.split()] for a in sys.argv[1:4])
m = {k: statistics.median(v) for k, v in (("plain", plain), ("kept", kept), ("interposed", inter))}
print(f"plain_cnn {sys.argv[5]}: median step, median of {sys.argv[4]} alternating rounds")
for k in ("plain", "kept", "interposed"):
    print(f"  {k:10s} {m[k]:8.3f} ms   rounds: {' '.join(f'{x:.2f}' for x in sorted(v for v in {'plain': plain, 'kept': kept, 'interposed': inter}[k]))}")
print(f"  interposed / plain {m['interposed'] / m['plain']:.3f}x, interposed / kept {m['interposed'] / m['kept']:.3f}x")
PY
