// The GPU's links as the CUDA copy engine uses them: host to device, device to host, both at once
// (one copy stream each way), and device to device, between a cuda arena and a pinned one. Medians
// of several copies of each size, timed by CUDA events on the copy streams. Prints a table and one
// JSON line per row. Needs a GPU: without one it says why in one line and exits 0.
//   bench_gpu_link [--mib N] [--reps N]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "stats.h"
#include "tensortier/allocator/tier_spec.h"
#include "tensortier/gpu/arena.h"
#include "tensortier/gpu/copy_engine.h"
#include "tensortier/gpu/device.h"

using namespace tensortier;
using namespace tensortier::gpu;

namespace {

struct Row {
  std::string what;
  double gbps = 0;
};

// GB/s of `reps` rounds of `copies` (each a dst, src, kind), all issued at once per round; timed
// from an event before them on each stream they use to the last copy's end.
double measure(Device& device, CudaCopyEngine& engine, std::size_t bytes, int reps,
               const std::vector<std::tuple<void*, const void*, CopyKind>>& copies) {
  const CudaApi& api = device.api();
  std::vector<double> gbps;
  for (int r = 0; r < reps; ++r) {
    EventHandle start = device.record(device.to_device()).value();
    (void)device.wait(device.to_host(), start);
    std::vector<EventHandle> ends;
    for (const auto& [dst, src, kind] : copies) ends.push_back(engine.copy(dst, src, bytes, kind).value());
    float longest = 0;
    for (EventHandle e : ends) {
      (void)device.synchronize(e);
      float ms = 0;
      (void)api.event_elapsed_ms(&ms, start, e);
      longest = std::max(longest, ms);
      device.release(e);
    }
    device.release(start);
    if (r > 0)
      gbps.push_back(static_cast<double>(bytes * copies.size()) / (static_cast<double>(longest) * 1e6));
  }
  return bench::median(gbps);
}

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
      {"host to device", measure(**device, engine, bytes, reps, {{d0, h0, CopyKind::kHostToDevice}})},
      {"device to host", measure(**device, engine, bytes, reps, {{h1, d1, CopyKind::kDeviceToHost}})},
      {"both at once (sum)", measure(**device, engine, bytes, reps,
                                     {{d0, h0, CopyKind::kHostToDevice}, {h1, d1, CopyKind::kDeviceToHost}})},
      {"device to device", measure(**device, engine, bytes, reps, {{d2, d1, CopyKind::kDeviceToDevice}})},
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
