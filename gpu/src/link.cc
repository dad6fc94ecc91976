// link_gbps and measure_link (see link.h).
#include "tensortier/gpu/link.h"

#include <algorithm>
#include <vector>

namespace tensortier::gpu {

double link_gbps(Device& device, CudaCopyEngine& engine, std::size_t bytes, int reps,
                 const std::vector<LinkCopy>& copies) {
  const CudaApi& api = device.api();
  std::vector<double> gbps;
  for (int r = 0; r < reps; ++r) {
    Result<EventHandle> start = device.record(device.to_device());
    if (!start) return 0;
    (void)device.wait(device.to_host(), start.value());
    float longest_ms = 0;
    bool failed = false;
    // Every copy of the round issued before any is waited for: several at once (each way over the
    // link) run together, as the figure for them says.
    std::vector<EventHandle> ends;
    for (const auto& [dst, src, kind] : copies) {
      Result<EventHandle> end = engine.copy(dst, src, bytes, kind);
      if (end) {
        ends.push_back(end.value());
      } else {
        failed = true;
      }
    }
    for (EventHandle end : ends) {
      float ms = 0;
      failed |= !device.synchronize(end).is_ok() || api.event_elapsed_ms(&ms, start.value(), end) != 0;
      longest_ms = std::max(longest_ms, ms);
      device.release(end);
    }
    device.release(start.value());
    if (failed) return 0;
    if (r > 0 && longest_ms > 0)
      gbps.push_back(static_cast<double>(bytes * copies.size()) / (static_cast<double>(longest_ms) * 1e6));
  }
  if (gbps.empty()) return 0;
  std::nth_element(gbps.begin(), gbps.begin() + static_cast<std::ptrdiff_t>(gbps.size() / 2), gbps.end());
  return gbps[gbps.size() / 2];
}

LinkRates measure_link(Device& device, std::size_t bytes, int reps) {
  const CudaApi& api = device.api();
  void* on_device = nullptr;
  void* pinned = nullptr;
  LinkRates rates;
  if (api.malloc_device(&on_device, bytes) == 0 && api.malloc_pinned(&pinned, bytes) == 0) {
    CudaCopyEngine engine(device);
    rates.to_device_gbps =
        link_gbps(device, engine, bytes, reps, {{on_device, pinned, CopyKind::kHostToDevice}});
    rates.to_host_gbps =
        link_gbps(device, engine, bytes, reps, {{pinned, on_device, CopyKind::kDeviceToHost}});
  }
  if (pinned != nullptr) (void)api.free_pinned(pinned);
  if (on_device != nullptr) (void)api.free_device(on_device);
  return rates;
}

}  // namespace tensortier::gpu
