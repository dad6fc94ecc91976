#!/usr/bin/env bash
# Installs the Debian 12 packages tensortier builds and tests with, where any is missing.
# Idempotent and quiet when nothing is missing; uses sudo when not run as root.
# The list is the one place our system dependencies are named (cmake/Dependencies.cmake finds
# them). Usage: tools/setup.sh [test] [vm]
#   test: adds what only the tests need (PyTorch for the cross-check and tensortier.torch)
#   vm:   adds what tests/numa_vm/run.sh needs to boot its two-node VM
#   fuzz: adds clang and libFuzzer for tools/fuzz.sh
set -euo pipefail

packages=(
  build-essential cmake pkg-config ninja-build git  # toolchain
  libmemkind-dev libhwloc-dev libnuma-dev           # tiers and topology
  libpapi-dev libtbb-dev libdnnl-dev                # counters, migration thread, oneDNN 2.6
  coinor-libcbc-dev                                 # the oracle's exact solver (COIN-OR CBC)
  ocl-icd-opencl-dev opencl-c-headers               # dnnl-config.cmake requires OpenCL (Debian builds it with the OCL runtime)
  nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev zlib1g-dev
  dataset-fashion-mnist                             # the trainer's default data set
  libgtest-dev libbenchmark-dev                     # tests and micro-benchmarks
  clang-format clang-tidy                           # style checks (CI)
  hwloc numactl                                     # lstopo / numactl -H for people
  python3-matplotlib                                # tools/tensortier-profile draws its PNGs with it
)
for group in "$@"; do
  case "$group" in
    test) packages+=(python3-torch                        # tests/torch/crosscheck.py (PyTorch 1.13)
                     libtorch-dev pybind11-dev python3-dev) ;;  # tensortier.torch (python/), its test
    vm) packages+=(qemu-system-x86 busybox-static cpio) ;;  # the two-node NUMA VM (tests/numa_vm/)
    fuzz) packages+=(clang libclang-rt-14-dev) ;;            # libFuzzer targets (tools/fuzz.sh)
    *) echo "setup: unknown group '$group' (known: test, vm, fuzz)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

as_root=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  as_root=(sudo)
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# A machine that never ran apt-get update has no package lists: update first, quietly.
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
