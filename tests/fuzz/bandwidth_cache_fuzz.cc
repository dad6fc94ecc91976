// Fuzz target: the DRAM-bandwidth cache parser (cost_model.h) on any text. Besides not crashing
// or throwing, what it accepts is for this machine and has finite positive bandwidths.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tensortier/allocator/cost_model.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto cached = tensortier::parse_bandwidth_cache(text, "cpu", std::uint64_t{1} << 30, 2);
  if (!cached) return 0;
  if (!(cached->read_gbps > 0 && std::isfinite(cached->read_gbps) && cached->write_gbps > 0 &&
        std::isfinite(cached->write_gbps) && cached->threads == 2))
    std::abort();
  return 0;
}
