#!/usr/bin/env bash
# tensortier-bench end to end on a tiny matrix (MLP, emulated optane-server):
#   1. bad input (unknown model, unknown policy, a budget over 100% or with no unit, a tier spec
#      this machine cannot open, a GPU backend without the GPU's tiers) is refused before anything
#      runs, naming it, and writes no results;
#   2. a run interrupted after 2 of 4 tasks (--max-tasks, as a kill between tasks would leave
#      it) is finished by the same command, which runs the other 2 only;
#   3. every output is written: results.json/.csv, table.md, trace.json and the PNGs;
#   4. another matrix on the same --out is refused (the results there are kept);
#   5-7. two runs on one --out, a results file of the wrong shape, a lock planted as a link or a
#      FIFO: each refused.
# Usage: tests/bench_cli.sh TENSORTIER_BENCH WORK_DIR
set -euo pipefail
bench=$1
work=$2
rm -rf "$work" && mkdir -p "$work"
fail() { echo "bench_cli: FAIL: $*" >&2; exit 1; }

tiny=(--models mlp --batch 8 --width 16 --budgets 50%,20% --policies slow-only,sentinel --steps 2 --reps 2)

# 1. Refused before anything runs.
refused() {  # EXPECTED_TEXT ARGS...
  local want=$1; shift
  local out rc=0
  out=$("$bench" --out "$work/bad" "$@" 2>&1) || rc=$?
  [[ $rc -eq 2 ]] || fail "'$*' exited $rc, not 2: $out"
  grep -qF -- "$want" <<<"$out" || fail "'$*' did not say '$want': $out"
  [[ ! -e $work/bad/results.json ]] || fail "'$*' wrote results"
}
small=(--batch 8 --width 16 --steps 2)
refused "unknown model 'resnet19' (known: mlp" "${small[@]}" --models resnet19
refused "unknown policy 'sentinal' (known:" "${small[@]}" --models mlp --policies sentinal
refused "--budgets '150%': a share of the profiled peak is a number above 0 and at most 100" "${small[@]}" --models mlp --budgets 150%
refused "--budgets '20': a number needs a unit" "${small[@]}" --models mlp --budgets 20
refused "--tiers 'fast=dram,slow=numa:7'" "${small[@]}" --models mlp --tiers fast=dram,slow=numa:7
refused "--numactl on: every spec is emulated" "${small[@]}" --models mlp --numactl on
# --backend cuda: the GPU's tiers, sized, no host-memory extras; a spec without a cuda tier is
# refused by the backend (or, in a build without the GPU backend, by the build).
refused "--backend cuda: give --tiers with the GPU's tiers" "${small[@]}" --models mlp --backend cuda
refused "give the cuda tier a size (e.g. fast=cuda:0:12GiB)" "${small[@]}" --models mlp --backend cuda \
  --tiers fast=cuda:0,slow=pinned:1GiB
refused "--tiers 'fast=dram:1GiB,slow=emulated:optane:1GiB' --backend cuda: " "${small[@]}" --models mlp \
  --backend cuda --tiers fast=dram:1GiB,slow=emulated:optane:1GiB
refused "--backend cuda: the numactl rows and the emulation check are about host memory" "${small[@]}" \
  --models mlp --backend cuda --tiers fast=cuda:0:1GiB,slow=pinned:1GiB --numactl on

# 2. Interrupted after two tasks, then finished by the same command.
rc=0
"$bench" --out "$work/run" "${tiny[@]}" --max-tasks 2 >"$work/first.log" 2>&1 || rc=$?
[[ $rc -eq 3 ]] || { cat "$work/first.log"; fail "the interrupted run exited $rc, not 3"; }
python3 - "$work/run/results.json" <<'PY' || fail "the interrupted run's results"
import json, sys
r = json.load(open(sys.argv[1]))
assert len(r["tasks"]) == 2, len(r["tasks"])
assert "summary" not in r
PY
cp "$work/run/results.json" "$work/interrupted.json"
"$bench" --out "$work/run" "${tiny[@]}" >"$work/second.log" 2>&1 || { cat "$work/second.log"; fail "the resumed run failed"; }
grep -q "4 tasks, 2 done already: running the other 2" "$work/second.log" || { cat "$work/second.log"; fail "the resumed run did not say it ran the other 2"; }
python3 - "$work/interrupted.json" "$work/run/results.json" <<'PY' || fail "the resumed run's results"
import json, sys
before = json.load(open(sys.argv[1]))["tasks"]
after = json.load(open(sys.argv[2]))
tasks = after["tasks"]
assert len(tasks) == 4, len(tasks)
for id, t in before.items():
    assert tasks[id] == t, f"task {id} ran again"  # kept as it was, not measured again
cells = after["summary"]["cells"]
assert len(cells) == 2 * 3, len(cells)  # 2 budgets x (fast-only, slow-only, sentinel)
for c in cells:
    assert c["reps"] == 2, c
    assert c["tiers"] == "emulated optane-server", c
    assert c["median_ms"] > 0 and c["ratio"] > 0, c
    # The mover copies no more than it moves (copied_mib counts moves neither clean nor of dead bytes).
    assert 0 <= c["copied_mib"] <= c["in_mib"] + c["out_mib"] + 1e-9, c
slow = [c for c in cells if c["policy"] == "slow-only"]
# The charge is applied: slow-only's layers find their bytes on the slow tier and are charged for
# them (what the code booked; its step time against fast-only's depends on this machine's load).
assert all(c["slow_mib"] > 0 and c["charge_ms"] > 0 for c in slow), slow
m = after["machine"]
for k in ("cpu", "cpus_online", "threads_used", "numa_nodes", "kernel", "tiering", "onednn", "tensortier"):
    assert k in m, k
assert m["numa_nodes"], m
PY

# 3. Every output.
for f in results.json results.csv table.md trace.json slowdown.png moved.png occupancy.png timeline.png; do
  [[ -s $work/run/$f ]] || fail "no $f"
done
[[ $(wc -l <"$work/run/results.csv") -eq 7 ]] || fail "results.csv: not a header and 6 cells"
grep -q "| mlp | emulated optane-server | 20% | 2 |" "$work/run/table.md" || fail "table.md has no 20% row"
grep -q "Emulated: rows on 'emulated optane-server'" "$work/second.log" || fail "the emulated figures are not named"
python3 - "$work/run/trace.json" "$work/run/results.json" <<'PY' || fail "trace or occupancy"
import json, sys
trace = json.load(open(sys.argv[1]))
assert any(e.get("cat") == "layer" for e in trace["traceEvents"]), "no layer in the trace"
occ = [t for t in json.load(open(sys.argv[2]))["tasks"].values() if "occupancy" in t]
assert len(occ) == 1, len(occ)
o = occ[0]["occupancy"]
assert o["policy"] == "sentinel" and occ[0]["budget"] == "20%", o
assert len(o["planned_bytes"]) == len(o["actual_bytes"]) == len(o["layers"]) + 1, o
assert max(o["planned_bytes"]) + o["small_reserve_bytes"] <= o["budget_bytes"], o
PY

# 4. Another matrix on the same --out.
rc=0
out=$("$bench" --out "$work/run" --models lenet5 --budgets 20% --steps 2 2>&1) || rc=$?
[[ $rc -eq 2 ]] && grep -q "holds another matrix" <<<"$out" || fail "another matrix was not refused: $out"
cmp -s <(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["tasks"]))' "$work/run/results.json") <(echo 4) ||
  fail "the refused run changed results.json"
# 5. Two runs on one --out: the second is refused naming the first's pid; a kill -9 of the first
#    takes its task child with it and lets the lock go.
long=(--models mlp --batch 8 --width 16 --budgets 50% --policies sentinel --steps 400 --reps 1)
"$bench" --out "$work/busy" "${long[@]}" >"$work/busy.log" 2>&1 &
first=$!
for _ in $(seq 100); do
  pgrep -f -- "--run-task $work/busy/" >/dev/null && break
  sleep 0.1
done
child=$(pgrep -f -- "--run-task $work/busy/" | head -1)
[[ -n $child ]] || { cat "$work/busy.log"; fail "the first run started no task"; }
rc=0
out=$("$bench" --out "$work/busy" "${long[@]}" 2>&1) || rc=$?
[[ $rc -eq 2 ]] && grep -q "is in use by another tensortier-bench (pid $first)" <<<"$out" ||
  fail "a second run on a busy --out was not refused naming pid $first: $out"
kill -9 "$first"
wait "$first" 2>/dev/null || true
for _ in $(seq 50); do
  kill -0 "$child" 2>/dev/null || break
  sleep 0.1
done
! kill -0 "$child" 2>/dev/null || { kill -9 "$child"; fail "the task child outlived its killed parent"; }
rc=0
out=$("$bench" --out "$work/busy" "${long[@]}" --max-tasks 0 2>&1) || rc=$?
[[ $rc -ne 2 ]] || ! grep -q "in use" <<<"$out" || fail "the lock outlived the killed run: $out"

# 6. A results file of the wrong shape: refused with what is wrong, never an abort.
for damaged in '{"config": {}, "tasks": []}' '{"config": {}, "tasks": 5}' '[1, 2]' '{"config": {}, "tasks": {"a": 1}}'; do
  mkdir -p "$work/damaged" && echo "$damaged" >"$work/damaged/results.json"
  rc=0
  out=$("$bench" --out "$work/damaged" "${tiny[@]}" 2>&1) || rc=$?
  [[ $rc -eq 2 ]] && grep -q "is not a results file of tensortier-bench" <<<"$out" ||
    fail "a results file '$damaged' was not refused (exit $rc): $out"
done
# 7. A lock file planted as a symbolic link (or a FIFO) in --out: refused, what it names untouched
#    (the pid overwrote the link's target before).
mkdir -p "$work/planted"
echo "keep" >"$work/precious"
ln -s "$work/precious" "$work/planted/.lock"
rc=0
out=$("$bench" --out "$work/planted" "${tiny[@]}" 2>&1) || rc=$?
[[ $rc -eq 2 ]] && grep -q "is a symbolic link" <<<"$out" || fail "a planted lock link was not refused (exit $rc): $out"
[[ $(cat "$work/precious") == keep && -L "$work/planted/.lock" ]] || fail "the planted link's target was written"
rm "$work/planted/.lock" && mkfifo "$work/planted/.lock"
rc=0
out=$(timeout 60 "$bench" --out "$work/planted" "${tiny[@]}" 2>&1) || rc=$?
[[ $rc -eq 2 ]] && grep -q "not a regular file" <<<"$out" || fail "a lock FIFO was not refused (exit $rc): $out"
echo "bench_cli: every check held"
