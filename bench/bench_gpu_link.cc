// The GPU's links as the CUDA copy engine uses them: host to device, device to host, both at once
// (one copy stream each way), and device to device, between a cuda arena and a pinned one. Medians
// of several copies of each size, timed by CUDA events on the copy streams (gpu/link.h). Prints a
// table and one JSON line per row. Needs a GPU: without one it says why in one line and exits 0.
//   bench_gpu_link [--mib N] [--reps N]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tensortier/allocator/tier_spec.h"
#include "tensortier/gpu/arena.h"
#include "tensortier/gpu/copy_engine.h"
#include "tensortier/gpu/device.h"
#include "tensortier/gpu/link.h"

using namespace tensortier;
using namespace tensortier::gpu;

namespace {

struct Row {
  std::string what;
  double gbps = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::size_t mib = 256;
  int reps = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--mib") == 0) mib = std::strtoul(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[i + 1]);
  }
  auto device = Device::open(real_cuda_api());
  if (!device) {
    fmt::print("bench_gpu_link: not measured: {}\n", device.status().message());
    return 0;
  }
  const std::size_t bytes = mib << 20;
  auto open = [&](const std::string& spec) {
    return GpuArena::open(**device, parse_tier_spec(spec).value().front());
  };
  auto dev = open(fmt::format("dev=cuda:{}:{}MiB", (*device)->index(), 3 * mib));
  auto host = open(fmt::format("host=pinned:{}MiB", 2 * mib));
  if (!dev || !host) {
    fmt::print("bench_gpu_link: not measured: {}\n", (!dev ? dev.status() : host.status()).message());
    return 1;
  }
  std::memset((*host)->base(), 1, 2 * bytes);
  CudaCopyEngine engine(**device);
  void* d0 = (*dev)->at(0, bytes);
  void* d1 = (*dev)->at(bytes, bytes);
  void* d2 = (*dev)->at(2 * bytes, bytes);
  void* h0 = (*host)->at(0, bytes);
  void* h1 = (*host)->at(bytes, bytes);
  const std::vector<Row> rows = {
      {"host to device", link_gbps(**device, engine, bytes, reps, {{d0, h0, CopyKind::kHostToDevice}})},
      {"device to host", link_gbps(**device, engine, bytes, reps, {{h1, d1, CopyKind::kDeviceToHost}})},
      {"both at once (sum)",
       link_gbps(**device, engine, bytes, reps,
                 {{d0, h0, CopyKind::kHostToDevice}, {h1, d1, CopyKind::kDeviceToHost}})},
      {"device to device", link_gbps(**device, engine, bytes, reps, {{d2, d1, CopyKind::kDeviceToDevice}})},
  };
  fmt::print("GPU links through the CUDA copy engine: {}; {} MiB copies, median of {}\n",
             (*device)->describe(), mib, reps - 1);
  for (const Row& r : rows) fmt::print("  {:<20} {:8.1f} GB/s\n", r.what, r.gbps);
  for (const Row& r : rows) {
    fmt::print(
        "JSON {{\"bench\": \"gpu_link\", \"what\": \"{}\", \"gbps\": {:.2f}, \"mib\": {}, \"device\": "
        "\"{}\"}}\n",
        r.what, r.gbps, mib, (*device)->name());
  }
  return 0;
}
