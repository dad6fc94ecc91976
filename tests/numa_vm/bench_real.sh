#!/usr/bin/env bash
# tensortier-bench's real-machine mode inside the two-node NUMA VM (tests/numa_vm/run.sh sets
# TENSORTIER_NUMA_VM_LAYOUT; anywhere else this skips with exit 77): a tiny matrix on
# fast=numa:0,slow=numa:1 (no cost model), the numactl rows and the emulation check included,
# runs to completion and writes every output; its machine record names both nodes and the
# CPU-less one.
# Usage: tests/numa_vm/bench_real.sh TENSORTIER_BENCH WORK_DIR
set -euo pipefail
bench=$1
work=$2
if [[ -z ${TENSORTIER_NUMA_VM_LAYOUT:-} ]]; then
  echo "bench_real: runs inside the two-node NUMA VM only (tests/numa_vm/run.sh boots it)"
  exit 77
fi
fail() { echo "bench_real: FAIL: $*" >&2; exit 1; }
rm -rf "$work"
"$bench" --out "$work" --tiers fast=numa:0,slow=numa:1 --models mlp --batch 8 --width 16 --budgets 50% \
  --policies slow-only,sentinel --steps 2 --numactl on >"$work.log" 2>&1 || { cat "$work.log"; fail "the run failed"; }
cat "$work.log"
for f in results.json results.csv table.md trace.json slowdown.png moved.png occupancy.png timeline.png; do
  [[ -s $work/$f ]] || fail "no $f"
done
python3 - "$work/results.json" <<'PY' || fail "results.json"
import json, sys
r = json.load(open(sys.argv[1]))
nodes = {n["node"]: n for n in r["machine"]["numa_nodes"]}
assert set(nodes) == {0, 1}, nodes
assert not nodes[0]["cpu_less"] and nodes[1]["cpu_less"], nodes
s = r["summary"]
assert len(s["cells"]) == 3, s["cells"]
for c in s["cells"]:
    assert not c["emulated"] and c["charge_ms"] == 0, c  # real tiers: no cost model
assert sorted(x["mode"] for x in s["numactl"]) == ["interleave", "membind-slow", "preferred-fast"], s["numactl"]
assert all("ratio" in x for x in s["numactl"]), s["numactl"]
checks = s["emulation_checks"]
assert len(checks) == 1 and checks[0]["preset"] == "remote-numa" and "measured" in checks[0], checks
print("bench_real: machine record, cells, numactl rows and the emulation check as expected")
PY
grep -q "The emulation model against the real slow node" "$work/table.md" || fail "table.md has no emulation check"
