#!/usr/bin/env bash
# The GPU device check (issues 37, 51): on a bare GPU machine with no package registry and no
# Debian 12, builds tensortier from this tree against the project's Debian packages (carried as
# .deb files, unpacked into a sysroot), then runs the GPU tests and a few CPU ones, measures the
# GPU's links, trains ResNet-18 on the GPU under the GPU's policies, profiles one CPU step (PAPI
# where the machine has hardware counters) and measures PyTorch's side. Two commands, each meant
# to take under 5 minutes on 16 cores; the run ends with one table, a row a step.
#
#   tools/device_check_gpu.sh --fetch DEBS_DIR         on a Debian 12 machine: download the .debs
#   tools/device_check_gpu.sh build DEBS_DIR [OUT_DIR]  on the GPU machine: sysroot, clean build
#   tools/device_check_gpu.sh run [OUT_DIR]             on the GPU machine: the checks and the table
#   tools/device_check_gpu.sh --dry-run [BUILD_DIR]     anywhere: every step that needs no GPU (the
#       machine's packages, BUILD_DIR's build, default build/release, built where it lacks a
#       target); each GPU command runs and must be refused for want of a device (its flags
#       accepted). Ends "no GPU: N steps skipped"; CI runs it.
#
# OUT_DIR (default build/device-out) holds the sysroot, the build, every step's log and the
# profile. Exit 0 when every step ran (or, in a dry run, was refused only for want of a GPU) and
# every test passed; with a GPU a skipped test is a failure (the tests skip only where no device
# exists).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

# The packages the build and the checks need, with what they pull that a bare image may lack.
packages=(
  libmemkind-dev libmemkind0 libdaxctl1 libndctl6 libkmod2 libnuma-dev libnuma1 libhwloc-dev libhwloc15 libudev1
  libpapi-dev libpapi7.0 libpfm4 libsde1 libtbb-dev libtbb12 libtbbmalloc2 libtbbbind-2-5 libdnnl-dev libdnnl2
  libgomp1 coinor-libcbc-dev coinor-libcbc3 coinor-libcgl-dev coinor-libcgl1 coinor-libclp-dev coinor-libclp1
  coinor-libosi-dev coinor-libosi1v5 coinor-libcoinutils-dev coinor-libcoinutils3v5 libbz2-dev libbz2-1.0
  liblapack-dev liblapack3 libblas-dev libblas3 libgfortran5 libquadmath0 ocl-icd-opencl-dev ocl-icd-libopencl1
  opencl-c-headers opencl-clhpp-headers nlohmann-json3-dev libcli11-dev libfmt-dev libfmt9 libspdlog-dev
  libspdlog1.10 zlib1g-dev zlib1g libgtest-dev libbenchmark-dev libbenchmark1debian pkgconf pkgconf-bin
  libpkgconf3 libltdl7 ninja-build
)

if [[ ${1:-} == --fetch ]]; then
  dir=${2:?usage: $0 --fetch DEBS_DIR}
  mkdir -p "$dir" && cd "$dir" && apt-get download "${packages[@]}"
  exit
fi

usage="usage: $0 build DEBS_DIR [OUT_DIR] | run [OUT_DIR] | --dry-run [BUILD_DIR] | --fetch DEBS_DIR"
mode=${1:-}
case $mode in
  build) debs=$(realpath "${2:?$usage}") && out=$(realpath -m "${3:-build/device-out}") ;;
  run) out=$(realpath -m "${2:-build/device-out}") ;;
  --dry-run) build=$(realpath -m "${2:-build/release}") && out=$(realpath -m "$build/device-dry-run") ;;
  *) echo "$usage" >&2 && exit 2 ;;
esac
mkdir -p "$out"
start=$SECONDS
failures=0
skipped=0
rows=()
step() { printf '\n=== %s (at %ds)\n' "$*" $((SECONDS - start)); }
# A row of the closing table: the step, its verdict (ok, FAIL, skipped) and what it read.
row() {
  rows+=("| $1 | $2 | ${3//|/\\|} |")
  [[ $2 == FAIL ]] && failures=$((failures + 1))
  [[ $2 == skipped ]] && skipped=$((skipped + 1))
  echo "device_check: $2: $1${3:+: $3}"
}
gpu_here=0
nvidia-smi -L >/dev/null 2>&1 && gpu_here=1
if [[ $mode == --dry-run && $gpu_here -eq 1 ]]; then
  echo "device_check: this machine has a GPU: run 'build' and 'run' instead of --dry-run" >&2
  exit 2
fi

# Runs a GPU command (a log name, then the command). Without a GPU it must be refused for want of
# a device or of the backend, its flags accepted: a skipped row; anything else fails.
gpu_command() {
  local name=$1
  shift
  local log=$out/$name.log
  if "$@" >"$log" 2>&1 && [[ $gpu_here -eq 1 ]]; then return 0; fi
  if [[ $gpu_here -eq 0 ]] && grep -qE 'no CUDA device|has no GPU backend' "$log"; then
    row "$name" skipped "$(grep -m1 -oE 'no CUDA device[^(]*|this build of tensortier has no GPU backend' "$log")"
    return 1
  fi
  row "$name" FAIL "$(tail -2 "$log" | tr '\n' ' ')"
  return 1
}

# The sysroot's environment for the run: written by build, read by run.
env_file=$out/env.sh

if [[ $mode == build ]]; then
  step "machine"
  date -u '+%Y-%m-%d %H:%M UTC'
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -3
  echo "$(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), kernel $(uname -r)"
  grep -m1 'model name' /proc/cpuinfo
  g++ --version | head -1
  cmake --version | head -1
  nvcc --version | tail -1

  step "sysroot from $(ls "$debs"/*.deb | wc -l) carried packages"
  sysroot=$out/sysroot
  rm -rf "$sysroot" && mkdir -p "$sysroot"
  for deb in "$debs"/*.deb; do
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$deb" "$sysroot"
    else  # a .deb is an ar archive holding data.tar.*
      (cd "$sysroot" && ar p "$deb" "$(ar t "$deb" | grep '^data.tar')" | tar -x -f - -a 2>/dev/null ||
        ar p "$deb" "$(ar t "$deb" | grep '^data.tar')" | tar -x --zstd -f - 2>/dev/null ||
        ar p "$deb" "$(ar t "$deb" | grep '^data.tar')" | tar -xJ -f -)
    fi
  done
  # Absolute symlinks (libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13) point into the sysroot.
  find "$sysroot" -type l -lname '/*' | while read -r link; do ln -sfn "$sysroot$(readlink "$link")" "$link"; done
  libdir=$sysroot/usr/lib/x86_64-linux-gnu
  export PATH=$sysroot/usr/bin:$PATH
  export PKG_CONFIG=$sysroot/usr/bin/pkgconf
  export PKG_CONFIG_PATH=$libdir/pkgconfig:$sysroot/usr/share/pkgconfig
  export PKG_CONFIG_LIBDIR=$PKG_CONFIG_PATH  # the carried packages' .pc files, not the machine's
  export PKG_CONFIG_SYSROOT_DIR=$sysroot
  export LD_LIBRARY_PATH=$libdir:$sysroot/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # cuDNN and cuBLAS from the machine's PyTorch wheels where the CUDA toolkit has none.
  cudnn_root=$(python3 -c 'import nvidia.cudnn, os; print(list(nvidia.cudnn.__path__)[0])' 2>/dev/null || true)
  if [[ -n $cudnn_root ]]; then
    export CUDNN_ROOT=$cudnn_root
    export LD_LIBRARY_PATH=$cudnn_root/lib:$LD_LIBRARY_PATH
    echo "cuDNN from $cudnn_root"
  fi
  echo "sysroot $sysroot: $(du -sh "$sysroot" | cut -f1)"
  declare -p PATH PKG_CONFIG PKG_CONFIG_PATH PKG_CONFIG_LIBDIR PKG_CONFIG_SYSROOT_DIR LD_LIBRARY_PATH \
    | sed 's/^declare -x /export /; s/^declare -- /export /' >"$env_file"
  [[ -n ${CUDNN_ROOT:-} ]] && echo "export CUDNN_ROOT=$CUDNN_ROOT" >>"$env_file"

  step "configure and build from a clean tree"
  build=$out/build
  rm -rf "$build"
  # TENSORTIER_GPU: ON here (a GPU machine must build the backend).
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTENSORTIER_GPU="${DEVICE_CHECK_GPU:-ON}" \
    -DCMAKE_PREFIX_PATH="$sysroot/usr" \
    -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$libdir" -DCMAKE_SHARED_LINKER_FLAGS="-Wl,-rpath-link,$libdir" \
    >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; echo "device_check: FAIL: configure"; exit 1; }
  grep -E "GPU backend" "$out/configure.log"
fi
# shellcheck source=/dev/null
[[ $mode == run ]] && build=$out/build && { source "$env_file" || { echo "device_check: run 'build' first ($env_file)"; exit 1; }; }

if [[ $mode == --dry-run && ! -f $build/CMakeCache.txt ]]; then
  step "configure $build (the machine's packages; the GPU backend where CUDA and cuDNN are found)"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTENSORTIER_GPU=AUTO >"$out/configure.log" 2>&1 ||
    { tail -30 "$out/configure.log"; echo "device_check: FAIL: configure"; exit 1; }
fi

# What the checks run: the CPU side always, the GPU side where the backend is configured.
targets=(tensortier-train reliability_test runtime_test)
gpu_tests=(gpu_fake_test gpu_runtime_test gpu_device_test cudnn_descriptors_test cudnn_backend_test)
gpu_built=0
grep -q 'cudnn_backend_test' "$build/build.ninja" 2>/dev/null && gpu_built=1
grep -q 'build bench/tensortier-bench:' "$build/build.ninja" 2>/dev/null && targets+=(tensortier-bench)
if [[ $gpu_built -eq 1 ]]; then
  targets+=("${gpu_tests[@]}" bench_gpu_link)
else
  gpu_tests=()
fi

if [[ $mode != run ]]; then
  step "build ${targets[*]}"
  if cmake --build "$build" --target "${targets[@]}" -j "$(nproc)" >"$out/build.log" 2>&1; then
    row build ok "${#targets[@]} targets in $build; GPU backend $([[ $gpu_built -eq 1 ]] && echo built || echo 'not built (no CUDA toolkit or cuDNN)')"
  else
    grep -E "error|Error" "$out/build.log" | head -20
    row build FAIL "see $out/build.log"
  fi
  if [[ $mode == build ]]; then
    step "done: build $([[ $failures -eq 0 ]] && echo ok || echo FAILED) in $((SECONDS - start)) s; next: $0 run $out"
    [[ $failures -eq 0 ]]
    exit
  fi
fi

step "tests: GPU (fake runtime, then the device), CPU (runtime, reliability)"
[[ $gpu_built -eq 0 ]] && row "GPU tests" skipped "the GPU backend was not built"
for t in "${gpu_tests[@]}" runtime_test reliability_test; do
  if "$build/tests/$t" >"$out/$t.log" 2>&1; then
    n_skipped=$(grep -oE '^\[  SKIPPED \] [0-9]+' "$out/$t.log" | grep -oE '[0-9]+$' || true)
    passed=$(grep -oE '^\[  PASSED  \] [0-9]+' "$out/$t.log" | grep -oE '[0-9]+$' || echo 0)
    if [[ -n $n_skipped && $n_skipped -gt 0 && $gpu_here -eq 1 ]]; then
      row "$t" FAIL "$n_skipped tests skipped on a machine with a GPU: $(grep -m1 -E '^\[  SKIPPED \] [A-Z]' "$out/$t.log")"
    elif [[ -n $n_skipped && $n_skipped -gt 0 ]]; then
      row "$t" skipped "$passed passed, $n_skipped skipped (no GPU)"
    else
      row "$t" ok "$passed passed"
    fi
  else
    row "$t" FAIL "$(grep -m3 -E 'FAILED|Failure' "$out/$t.log" | tr '\n' ' ')"
  fi
done

step "the GPU's links through the CUDA copy engine"
if [[ $gpu_built -eq 0 ]]; then
  row "GPU links" skipped "the GPU backend was not built"
elif [[ $gpu_here -eq 0 ]]; then
  "$build/bench/bench_gpu_link" --mib 512 --reps 8 >"$out/gpu_link.log" 2>&1
  if grep -q 'no CUDA device' "$out/gpu_link.log"; then row "GPU links" skipped "no CUDA device"; else row "GPU links" FAIL "$(tail -1 "$out/gpu_link.log")"; fi
elif "$build/bench/bench_gpu_link" --mib 512 --reps 8 >"$out/gpu_link.log" 2>&1; then
  cat "$out/gpu_link.log"
  row "GPU links" ok "$(grep -m1 -iE 'GB/s' "$out/gpu_link.log")"
else
  row "GPU links" FAIL "$(tail -1 "$out/gpu_link.log")"
fi

# One training run on the GPU: its median step and device peak in the row, loss at step 1 beside
# the CPU backend's for batch 128 fast-only.
train_cuda() {  # batch policy budget
  local name="train b$1 $2 $3"
  if gpu_command "train_b$1_$2_${3%\%}" timeout 60 "$build/dnn/tensortier-train" --backend cuda --model resnet18 \
    --data synthetic --batch "$1" --steps 10 --log-every 1 --tiers fast=cuda:0,slow=pinned:16GiB --policy "$2" \
    --fast-budget "$3"; then
    local log=$out/train_b$1_$2_${3%\%}.log
    row "$name" ok "$(grep -E '^step 10/' "$log" | grep -oE '[0-9.]+ ms/step'); $(grep -m1 -oE 'peak [0-9.]+ [KMG]iB' "$log"); step 1 $(grep -E '^step 1/' "$log" | grep -oE 'loss [0-9.]+')"
  fi
}
step "our side: ResNet-18 on the GPU (--backend cuda), batch 128 and 32, the GPU's policies"
[[ $gpu_built -eq 0 && $mode == --dry-run ]] && echo "(the backend is not built: each run must say so)"
for run in "128 fast-only 100%" "128 smartpool 100%" "128 autoswap 70%" "128 autoswap 50%" "128 sentinel 50%" \
  "32 fast-only 100%" "32 smartpool 100%"; do
  read -r batch policy budget <<<"$run"
  train_cuda "$batch" "$policy" "$budget"
done
if timeout 120 "$build/dnn/tensortier-train" --model resnet18 --data synthetic --batch 128 --steps 1 --log-every 1 \
  --tiers fast=dram:16GiB >"$out/train_cpu_b128.log" 2>&1; then
  row "train b128 cpu" ok "step 1 $(grep -E '^step 1/' "$out/train_cpu_b128.log" | grep -oE 'loss [0-9.]+') (the CPU backend, the same seed and batches as the GPU rows)"
else
  row "train b128 cpu" FAIL "$(tail -1 "$out/train_cpu_b128.log")"
fi

step "tensortier-bench --backend cuda: ResNet-18, batch 64, the GPU's policies side by side"
if [[ ! -x $build/bench/tensortier-bench ]]; then
  row bench_cuda skipped "tensortier-bench is not part of $build (TENSORTIER_BUILD_BENCH off)"
elif gpu_command bench_cuda timeout 120 "$build/bench/tensortier-bench" --backend cuda \
  --tiers fast=cuda:0:8GiB,slow=pinned:8GiB --models resnet18 --batch 64 --budgets 100%,70%,50% \
  --policies smartpool,autoswap,sentinel --steps 3 --timed-bound-s 10 --tightened-bound-s 0 --no-plots --fresh \
  --out "$out/bench-cuda"; then
  cat "$out/bench-cuda/table.md"
  row bench_cuda ok "table in $out/bench-cuda/table.md"
fi

step "one CPU training step profiled (ResNet-18, batch 32): the counters it read"
if "$build/dnn/tensortier-train" --model resnet18 --data synthetic --batch 32 --steps 3 --log-every 3 \
  --tiers fast=dram:8GiB --profile-json "$out/profile.json" >"$out/train.log" 2>&1 &&
  python3 - "$out/profile.json" >"$out/counters.log" 2>&1 <<'PY'; then
import json, sys
p = json.load(open(sys.argv[1]))
totals = {}
for layer in p["layers"]:
    for c in layer.get("counters", []):
        totals[c["name"]] = totals.get(c["name"], 0) + c["value"]
notes = [n for n in p.get("notes", []) if "PAPI" in n]
print(f"counters from {p.get('counter_source')}; summed over {len(p['layers'])} layers:",
      ", ".join(f"{k} {v:.4g}" for k, v in totals.items()) or "none", ("; " + notes[0]) if notes else "")
PY
  cat "$out/counters.log"
  row "CPU step profiled" ok "$(cat "$out/counters.log")"
else
  row "CPU step profiled" FAIL "$(tail -1 "$out/train.log") $(tail -1 "$out/counters.log" 2>/dev/null)"
fi

step "PyTorch's side: ResNet-18 on the GPU, batch 128 and 32, plain and save_on_cpu(pin_memory), TF32 off"
for batch in 128 32; do
  if timeout 120 python3 bench/pytorch_gpu_step.py resnet18 "$batch" 10 3 --math fp32 >"$out/pytorch_b$batch.log" 2>&1; then
    if grep -qE 'not measured|no GPU|no CUDA' "$out/pytorch_b$batch.log"; then
      [[ $gpu_here -eq 1 ]] && row "pytorch b$batch" FAIL "$(head -1 "$out/pytorch_b$batch.log")" ||
        row "pytorch b$batch" skipped "$(head -1 "$out/pytorch_b$batch.log")"
    else
      row "pytorch b$batch" ok "$(tr '\n' ' ' <"$out/pytorch_b$batch.log")"
    fi
  else
    row "pytorch b$batch" FAIL "$(tail -1 "$out/pytorch_b$batch.log")"
  fi
done

step "the table"
echo "| step | verdict | what it read |"
echo "| --- | --- | --- |"
printf '%s\n' "${rows[@]}"
if [[ $mode == --dry-run ]]; then
  echo "no GPU: $skipped steps skipped, $failures failed (dry run, $((SECONDS - start)) s)"
else
  echo "device check: $failures failed, $skipped skipped in $((SECONDS - start)) s"
fi
[[ $failures -eq 0 ]]
