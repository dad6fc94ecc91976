#!/usr/bin/env bash
# Hostile input to tensortier-train: each case must be refused with a message that names the
# problem and a failing exit status (never a signal, never success), or, for a bad cache, run
# as if the cache were not there. Usage: tests/cli_hostile_input.sh TRAIN_BINARY
set -uo pipefail
train=${1:?usage: $0 path/to/tensortier-train}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
run=(--model mlp --data synthetic --width 4 --batch 4 --synthetic-count 16 --steps 2)
small=("${run[@]}" --tiers fast=dram:64MiB)

# expect_refusal NAME PATTERN ARGS...: exits with a status of 1..128 (CLI11's own refusals use
# 105 and up; over 128 is a signal) and prints PATTERN.
expect_refusal() {
  local name=$1 pattern=$2
  shift 2
  local out status
  out=$("$@" 2>&1)
  status=$?
  if [[ $status -eq 0 || $status -gt 128 ]]; then
    echo "FAIL $name: exit status $status (a refusal exits 1..128; over 128 is a signal)"
    echo "$out" | tail -5
    failures=$((failures + 1))
  elif ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL $name: exit $status without /$pattern/ in:"
    echo "$out" | tail -5
    failures=$((failures + 1))
  else
    echo "ok   $name: $(grep -E -- "$pattern" <<<"$out" | head -1)"
  fi
}

expect_warning() {  # NAME PATTERN ARGS...: runs to success and warns with PATTERN
  local name=$1 pattern=$2
  shift 2
  local out
  if ! out=$("$@" 2>&1); then
    echo "FAIL $name: exit $?:"; echo "$out" | tail -5; failures=$((failures + 1))
  elif ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL $name: no /$pattern/ in:"; echo "$out" | tail -5; failures=$((failures + 1))
  else
    echo "ok   $name: $(grep -E -- "$pattern" <<<"$out" | head -1)"
  fi
}

expect_refusal log-every-0 "--log-every" "$train" "${small[@]}" --log-every 0
expect_refusal classes-0 "--classes" "$train" "${small[@]}" --classes 0
expect_refusal classes-negative "--classes" "$train" "${small[@]}" --classes -3
expect_refusal channels-0 "--channels" "$train" "${small[@]}" --channels 0
expect_refusal image-size-0 "--image-size" "$train" "${small[@]}" --image-size 0
expect_refusal profile-huge "--profile.*too large" "$train" "${small[@]}" --profile 99999999999999999999999
expect_refusal lr-nan "--lr nan" "$train" "${small[@]}" --lr nan
expect_refusal lr-inf "--lr inf" "$train" "${small[@]}" --lr inf
expect_refusal momentum-negative "--momentum" "$train" "${small[@]}" --momentum -1
expect_refusal trial-steps-huge "--trial-steps.*not in range" "$train" "${small[@]}" --trial-steps 500
expect_refusal trial-steps-negative "--trial-steps" "$train" "${small[@]}" --trial-steps -1

# --profile-json that cannot be written: a directory, a missing directory. A good profile
# already there survives a failed write.
expect_refusal profile-json-directory "is a directory" "$train" "${small[@]}" --profile-json "$work"
expect_refusal profile-json-missing-dir "cannot write the profile to '$work/none/p.json'" \
  "$train" "${small[@]}" --profile-json "$work/none/p.json"
# The library's log lines go to stderr, not into the program's output.
if "$train" "${small[@]}" --profile-json "$work" 2>/dev/null | grep -q 'warning\]'; then
  echo "FAIL log-to-stderr: a library warning went to stdout"
  failures=$((failures + 1))
else
  echo "ok   log-to-stderr: no library line on stdout"
fi
if "$train" "${small[@]}" --profile-json "$work/good.json" >/dev/null 2>&1 && [[ -s "$work/good.json" ]]; then
  cp "$work/good.json" "$work/good.before"
  chmod a-w "$work"
  if [[ $(id -u) -ne 0 ]]; then  # root writes anywhere: the case cannot be set up
    expect_refusal profile-json-unwritable "writing the profile to|cannot write the profile" \
      "$train" "${small[@]}" --profile-json "$work/good.json"
    cmp -s "$work/good.json" "$work/good.before" || { echo "FAIL: a failed write changed the good profile"; failures=$((failures + 1)); }
  fi
  chmod u+w "$work"
  ls "$work"/*.tmp >/dev/null 2>&1 && { echo "FAIL: a temporary profile file was left behind"; failures=$((failures + 1)); }
else
  echo "FAIL profile-json-good: a profile was not written to $work/good.json"
  failures=$((failures + 1))
fi

# A --trace that cannot be written (a full disk: a file size limit here, as root writes anywhere)
# fails the run with the cause and leaves a good trace already there as it was.
traced=(--model mlp --data synthetic --width 4 --batch 4 --synthetic-count 16 --steps 3 --tiers fast=dram:64MiB
  --trace "$work/trace.json" --trace-from 2 --trace-steps 1)
if "$train" "${traced[@]}" >/dev/null 2>&1 && [[ -s "$work/trace.json" ]]; then
  cp "$work/trace.json" "$work/trace.before"
  expect_refusal trace-disk-full "writing the trace to '$work/trace.json' failed" \
    bash -c 'trap "" XFSZ; ulimit -f 1; exec "$0" "$@"' "$train" "${traced[@]}"
  cmp -s "$work/trace.json" "$work/trace.before" || { echo "FAIL: a failed write changed the good trace"; failures=$((failures + 1)); }
  python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$work/trace.json" || { echo "FAIL: the trace is not JSON"; failures=$((failures + 1)); }
  ls "$work"/*.tmp >/dev/null 2>&1 && { echo "FAIL: a temporary trace file was left behind"; failures=$((failures + 1)); }
else
  echo "FAIL trace-good: no trace was written to $work/trace.json"
  failures=$((failures + 1))
fi

# A policy that cannot run is refused, or says why in one line and fails the run: a fast budget
# the fast tier cannot hold, one below a chunk of small objects, a share below what the profiled
# step's small objects need, profiling off, a profile at the last step or later.
policy=(--data synthetic --width 4 --batch 4 --synthetic-count 16 --steps 4
  --tiers fast=dram:2MiB,slow=emulated:optane:64MiB --policy sentinel)
expect_refusal budget-over-the-tier "fast budget 64.0 MiB for policy 'sentinel' is more than the fast tier 'fast' holds \(2.00 MiB" \
  "$train" "${policy[@]}" --model mlp --fast-budget 64MiB
expect_refusal budget-under-a-chunk "holds not even one 64.0 KiB chunk of small objects: give at least 64.0 KiB" \
  "$train" "${policy[@]}" --model mlp --fast-budget 4KiB
expect_refusal budget-share-under-the-small-objects "^policy 'sentinel' does not run: a fast budget of .* is less than the profiled step's small objects need .* give at least" \
  "$train" "${policy[@]}" --model mlp --fast-budget 0.0001%
expect_refusal policy-profile-off-env "profiling is off \(TENSORTIER_PROFILE=off" \
  env TENSORTIER_PROFILE=off "$train" "${policy[@]}" --model mlp --fast-budget 50%
expect_refusal policy-profile-after-the-last-step "step 4 is profiled .* of a run of 4 training steps" \
  "$train" "${policy[@]}" --model mlp --fast-budget 50% --profile 4
# Too few open files to list the threads (`ulimit -n 5`): no profile, no policy, said so; the
# training runs (it corrupted the heap once: threads without an alternate signal stack).
# (Not under the sanitizers: their own runtime needs file descriptors, and reports false errors
# without them.)
# (ldd's output read whole first: `ldd | grep -q` under pipefail fails where grep exits before
# ldd has written everything, and the check then ran under ASan now and then.)
libraries=$(ldd "$train")
if grep -qE 'libasan|libtsan' <<<"$libraries"; then
  echo "skip policy-no-profile-few-files: a sanitizer build"
else
expect_refusal policy-no-profile-few-files "^policy 'sentinel' does not run: the profile it plans from could not be made: the process's threads cannot be listed|Too many open files" \
  bash -c 'ulimit -n 5; exec "$0" "$@"' "$train" "${policy[@]}" --model mlp --fast-budget 50%
fi
# Batch 16: a step of batch 4 fits in 2 MiB.
expect_warning budget-share-over-the-tier "is more than the fast tier holds: it keeps the tier's 2.00 MiB" \
  "$train" --data synthetic --width 4 --batch 16 --synthetic-count 32 --steps 4 \
  --tiers fast=dram:2MiB,slow=emulated:optane:64MiB --policy sentinel --fast-budget 100% --model lenet5

# Fashion-MNIST files that lie: test images of another size, a header whose dims overflow.
python3 - "$work" <<'PY'
import gzip, struct, sys, os
work = sys.argv[1]
def idx(path, dims, data):
    with gzip.open(path, "wb") as f:
        f.write(struct.pack(">BBBB", 0, 0, 8, len(dims)) + b"".join(struct.pack(">I", d) for d in dims) + data)
for name, test_side, train_dims in (("mismatch", 20, None), ("overflow", 28, (4, 2**31, 2**31))):
    d = os.path.join(work, name)
    os.makedirs(d)
    n = 16 if train_dims is None else train_dims[0]
    if train_dims is None:
        idx(f"{d}/train-images-idx3-ubyte.gz", (n, 28, 28), bytes(n * 28 * 28))
    else:
        idx(f"{d}/train-images-idx3-ubyte.gz", train_dims, b"")
    idx(f"{d}/train-labels-idx1-ubyte.gz", (n,), bytes(i % 10 for i in range(n)))
    idx(f"{d}/t10k-images-idx3-ubyte.gz", (n, test_side, test_side), bytes(n * test_side * test_side))
    idx(f"{d}/t10k-labels-idx1-ubyte.gz", (n,), bytes(n))
PY
expect_refusal test-images-other-size "test images .* are 1x20x20 but the training images are 1x28x28" \
  "$train" --model mlp --width 4 --batch 4 --steps 2 --tiers fast=dram:64MiB --data-dir "$work/mismatch"
expect_refusal idx-dims-overflow "truncated or corrupt: its header's dims 4 x 2147483648 x 2147483648" \
  "$train" --model mlp --width 4 --batch 4 --steps 2 --tiers fast=dram:64MiB --data-dir "$work/overflow"

# A DRAM-bandwidth cache with the wrong types in it is a hint gone bad: measured again, and the
# run goes on.
mkdir -p "$work/cache/tensortier"
echo '{"read_gbps": "fast", "write_gbps": [1], "threads": {}, "cpu_model": 3, "memory_bytes": null}' \
  > "$work/cache/tensortier/dram_bandwidth.json"
if out=$(XDG_CACHE_HOME="$work/cache" "$train" "${run[@]}" --tiers fast=dram:64MiB,slow=emulated:cxl:1GiB 2>&1); then
  echo "ok   bad-bandwidth-cache: trained ($(grep -c 'test accuracy' <<<"$out") test line)"
else
  echo "FAIL bad-bandwidth-cache: exit $? with a malformed cache:"
  echo "$out" | tail -5
  failures=$((failures + 1))
fi

# Tiers: an empty --tiers (it meant discovery, silently), a budget under one page, a budget over
# the machine's memory (kept, with a warning), an emulated tier alone (run, with a warning).
expect_refusal tiers-empty "--tiers.*empty" "$train" "${run[@]}" --tiers ""
expect_refusal budget-under-a-page "less than one 4 KiB page" "$train" "${run[@]}" --tiers fast=dram:100B
expect_warning budget-over-memory "budget of 64.0 TiB is more than this machine's memory" \
  "$train" "${run[@]}" --tiers fast=dram:64TiB
expect_warning emulated-only "the only tier, 'slow', is emulated" \
  "$train" "${run[@]}" --tiers slow=emulated:cxl:1GiB

echo "$failures failed"
[[ $failures -eq 0 ]]
