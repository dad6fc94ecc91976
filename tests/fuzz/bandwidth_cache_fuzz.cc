// Fuzz target: the DRAM-bandwidth cache parser (cost_model.h) on any text. Besides not crashing or
// throwing, what it accepts has finite positive bandwidths, survives its own writer unchanged, and
// the staleness rule takes it without a crash.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tensortier/allocator/cost_model.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto cached = tensortier::parse_bandwidth_cache(text);
  if (!cached) return 0;
  const tensortier::FastBandwidth& b = cached->bandwidth;
  if (!(b.read_gbps > 0 && std::isfinite(b.read_gbps) && b.write_gbps > 0 && std::isfinite(b.write_gbps)))
    std::abort();
  auto again = tensortier::parse_bandwidth_cache(tensortier::bandwidth_cache_text(*cached));
  if (!again || again->bandwidth.read_gbps != b.read_gbps ||
      again->conditions.kernel != cached->conditions.kernel || again->measured_at_s != cached->measured_at_s)
    std::abort();
  (void)tensortier::bandwidth_cache_stale(cached, cached->conditions, cached->measured_at_s, b);
  return 0;
}
