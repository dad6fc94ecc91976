#!/usr/bin/env bash
# The GPU device check (issue 37): on a bare GPU machine with no package registry and no Debian 12,
# builds tensortier from this tree against the project's Debian packages, carried as .deb files and
# unpacked into a sysroot; runs the GPU tests and a few CPU ones; measures the GPU's links through
# the CUDA copy engine; profiles one CPU training step (PAPI where the machine has hardware
# counters) and says what it read; and measures PyTorch's side of the GPU figures. Under 5 minutes
# on 16 cores. docs/RESULTS.md ("GPU device check") holds its output.
#
#   tools/device_check_gpu.sh --fetch DEBS_DIR   on a Debian 12 machine: download the .debs
#   tools/device_check_gpu.sh DEBS_DIR [OUT_DIR]  on the GPU machine: the check
#
# Output: one section per step on stdout ("=== ..."), the figures as JSON lines, and OUT_DIR
# (default build/device-out) with the logs and the profile. Exit 0 when every step ran and every
# test passed (GPU tests skip, saying why, where there is no GPU; with a GPU a skip fails the check).
set -uo pipefail
cd "$(dirname "$0")/.."

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

debs=$(realpath "${1:?usage: $0 DEBS_DIR [OUT_DIR] (or --fetch DEBS_DIR)}")
out=$(realpath -m "${2:-build/device-out}")
mkdir -p "$out"
start=$SECONDS
failures=0
step() { printf '\n=== %s (at %ds)\n' "$*" $((SECONDS - start)); }
fail() { echo "device_check: FAIL: $*"; failures=$((failures + 1)); }

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

step "configure and build from a clean tree"
build=$out/build
rm -rf "$build"
# TENSORTIER_GPU: ON here (a GPU machine must build the backend); AUTO to try the script where
# there is no CUDA toolkit (the GPU steps then say they did not run).
gpu=${DEVICE_CHECK_GPU:-ON}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTENSORTIER_GPU="$gpu" \
  -DCMAKE_PREFIX_PATH="$sysroot/usr" \
  -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$libdir" -DCMAKE_SHARED_LINKER_FLAGS="-Wl,-rpath-link,$libdir" \
  >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; fail "configure"; exit 1; }
grep -E "GPU backend" "$out/configure.log"
targets=(tensortier-train reliability_test runtime_test)
gpu_tests=()
if grep -q "GPU backend: CUDA" "$out/configure.log"; then
  targets+=(gpu_fake_test gpu_runtime_test gpu_device_test cudnn_descriptors_test cudnn_backend_test bench_gpu_link
            tensortier-bench)
  gpu_tests=(gpu_fake_test gpu_runtime_test gpu_device_test cudnn_descriptors_test cudnn_backend_test)
else
  fail "the GPU backend was not configured: $(grep 'GPU backend' "$out/configure.log")"
fi
cmake --build "$build" --target "${targets[@]}" -j "$(nproc)" >"$out/build.log" 2>&1 ||
  { grep -E "error|Error" "$out/build.log" | head -20; fail "build"; exit 1; }
echo "built ${targets[*]}"

step "tests: GPU (fake runtime, then the device), CPU (runtime, reliability)"
# With a GPU here a skipped test is a failure of the check: the tests skip only where no device
# exists, so a skip on a GPU machine is a backend that did not work, not one that was not tried.
gpu_here=0
nvidia-smi -L >/dev/null 2>&1 && gpu_here=1
for t in "${gpu_tests[@]}" runtime_test reliability_test; do
  if "$build/tests/$t" >"$out/$t.log" 2>&1; then
    skipped=$(grep -oE '^\[  SKIPPED \] [0-9]+' "$out/$t.log" | grep -oE '[0-9]+$' || true)
    if [[ $gpu_here -eq 1 && -n $skipped && $skipped -gt 0 ]]; then
      grep -E '^\[  SKIPPED \] [A-Z]' "$out/$t.log" | head -5
      fail "$t: $skipped tests skipped on a machine with a GPU"
    else
      echo "ok   $t: $(grep -E '^\[  (PASSED|SKIPPED) +\] [0-9]' "$out/$t.log" | tr '\n' ' ')"
    fi
  else
    grep -E 'FAILED|Failure' "$out/$t.log" | head -10
    fail "$t"
  fi
done
grep -hs '^device: ' "$out/gpu_device_test.log" | head -1
grep -hs 'the link moves\|^runtime on GPU tiers' "$out/gpu_device_test.log" | head -2

step "the GPU's links through the CUDA copy engine"
if [[ -x $build/bench/bench_gpu_link ]]; then
  "$build/bench/bench_gpu_link" --mib 512 --reps 8 | tee "$out/gpu_link.log" || fail "bench_gpu_link"
else
  echo "not measured: the GPU backend was not built"
fi

step "our side: ResNet-18 on the GPU (--backend cuda), batch 128, under smartpool and autoswap"
if grep -q "GPU backend: CUDA" "$out/configure.log"; then
  for run in "fast-only 100%" "smartpool 100%" "autoswap 70%" "autoswap 50%"; do
    read -r policy budget <<<"$run"
    timeout 90 "$build/dnn/tensortier-train" --backend cuda --model resnet18 --data synthetic --batch 128 \
      --steps 12 --log-every 12 --tiers fast=cuda:0,slow=pinned:16GiB --policy "$policy" --fast-budget "$budget" \
      >"$out/train_cuda_${policy}_${budget%\%}.log" 2>&1 || fail "tensortier-train --backend cuda $run"
    echo "$run: $(grep -E '^step [0-9]+/[0-9]+ |^tier fast: peak' "$out/train_cuda_${policy}_${budget%\%}.log" | tail -2 | tr '\n' ' ')"
  done
else
  echo "not run: the GPU backend was not built"
fi

step "tensortier-bench --backend cuda: ResNet-18, batch 64, the GPU's policies side by side"
if grep -q "GPU backend: CUDA" "$out/configure.log"; then
  timeout 120 "$build/bench/tensortier-bench" --backend cuda --tiers fast=cuda:0:8GiB,slow=pinned:8GiB \
    --models resnet18 --batch 64 --budgets 100%,70%,50% --policies smartpool,autoswap,sentinel --steps 3 \
    --tightened-bound-s 0 --no-plots --fresh --out "$out/bench-cuda" >"$out/bench_cuda.log" 2>&1 || fail "tensortier-bench --backend cuda"
  cat "$out/bench-cuda/table.md" 2>/dev/null || tail -5 "$out/bench_cuda.log"
else
  echo "not run: the GPU backend was not built"
fi

step "one CPU training step profiled (ResNet-18, batch 32): the counters it read"
"$build/dnn/tensortier-train" --model resnet18 --data synthetic --batch 32 --steps 3 --log-every 3 \
  --tiers fast=dram:8GiB --profile-json "$out/profile.json" >"$out/train.log" 2>&1 || fail "tensortier-train"
grep -E "counters|profile of step" "$out/train.log" | head -4
python3 - "$out/profile.json" <<'PY' || fail "reading the profile"
import json, sys
p = json.load(open(sys.argv[1]))
print("counter source:", p.get("counter_source"))
for note in p.get("notes", []):
    print("note:", note)
totals = {}
for layer in p["layers"]:
    for c in layer.get("counters", []):
        totals[c["name"]] = totals.get(c["name"], 0) + c["value"]
print("summed over the step's", len(p["layers"]), "layers:", ", ".join(f"{k} {v:.4g}" for k, v in totals.items()))
PY

step "PyTorch's side: ResNet-18 on the GPU, batch 128, plain and save_on_cpu(pin_memory)"
timeout 120 python3 bench/pytorch_gpu_step.py resnet18 128 10 3 2>&1 | tee "$out/pytorch.log" || fail "pytorch_gpu_step"

step "done: $failures failed"
[[ $failures -eq 0 ]]
