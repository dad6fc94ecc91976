#!/usr/bin/env bash
# Side by side: the dnn engine (through the runtime, and with plain allocation) against PyTorch
# 1.13 on the same models, batch and thread count; ROUNDS rounds that alternate the two
# processes, each reporting a median over STEPS steps after WARMUP; the table shows the median
# of the rounds. PyTorch runs with the glibc malloc tunables that make it fastest here.
# tensortier runs twice a round: with its default convolutions (--conv auto: Winograd where it
# pays) and with direct ones only (--conv direct, as PyTorch 1.13 runs them), so that the table
# separates the algorithm from how the engine drives oneDNN. Peak footprint: tensortier's live
# objects (RuntimeStats::peak_live_bytes), the same between primitives (without the scratchpads
# that live inside one primitive: Engine::peak_live_bytes_between_primitives) and PyTorch's
# (pytorch_step_time.py says how: it nets allocations an op frees before it returns).
# Usage: bench/compare_pytorch.sh [BUILD_DIR]   Environment: MODELS, ROUNDS, STEPS, WARMUP, BATCH
set -euo pipefail
BUILD=${1:-build/release}
MODELS=${MODELS:-resnet18 vgg11}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-10}
WARMUP=${WARMUP:-3}
BATCH=${BATCH:-32}
THREADS=$(nproc)
here=$(dirname "$0")
out=$(mktemp)
for model in $MODELS; do
  for round in $(seq "$ROUNDS"); do
    for conv in auto direct; do
      OMP_NUM_THREADS=$THREADS "$BUILD/bench/bench_training" --model "$model" --batch "$BATCH" --steps "$STEPS" \
        --warmup "$WARMUP" --conv "$conv" | grep '^JSON' >> "$out"
    done
    GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296 \
      /usr/bin/python3 "$here/pytorch_step_time.py" "$model" "$BATCH" "$STEPS" "$WARMUP" "$THREADS" >> "$out"
  done
done
/usr/bin/python3 - "$out" "$ROUNDS" "$STEPS" "$WARMUP" "$BATCH" "$THREADS" <<'PY'
import json, statistics, sys
rows = [json.loads(l.split(" ", 1)[1]) for l in open(sys.argv[1]) if l.startswith("JSON")]
rounds, steps, warmup, batch, threads = sys.argv[2:]
print(f"batch {batch}, 32x32x3, {threads} threads; median of {rounds} rounds, each the median of {steps} steps after {warmup}")
print("| model | tensortier (runtime) ms | direct convs ms | plain alloc ms | PyTorch 1.13 ms | tensortier / PyTorch | direct convs / PyTorch | runtime / plain | peak MiB (tensortier, between primitives, PyTorch) | peak / PyTorch (all, between primitives) | faults/step (runtime, plain) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for model in dict.fromkeys(r["model"] for r in rows):
    def med(mode, conv="auto", key="median_ms"):
        return statistics.median(r[key] for r in rows
                                 if r["model"] == model and r["mode"] == mode and r.get("conv", conv) == conv)
    rt, direct, plain, torch = med("runtime"), med("runtime", "direct"), med("plain"), med("pytorch")
    peak, between, torch_peak = (med("runtime", key="peak_live_mib"), med("runtime", key="peak_between_primitives_mib"),
                                 med("pytorch", key="peak_live_mib"))
    print(f"| {model} | {rt:.0f} | {direct:.0f} | {plain:.0f} | {torch:.0f} | {rt / torch:.2f} | {direct / torch:.2f} "
          f"| {rt / plain:.3f} | {peak:.0f}, {between:.0f}, {torch_peak:.0f} | {peak / torch_peak:.2f}, {between / torch_peak:.2f} "
          f"| {med('runtime', key='median_faults'):.0f}, {med('plain', key='median_faults'):.0f} |")
PY
rm -f "$out"
