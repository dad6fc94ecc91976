// Fuzz target: the tier spec and size parsers (tier_spec.h) on any bytes. Besides not crashing
// (ASan, UBSan), a spec that parses must round-trip: its formatted form parses to the same form.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tensortier/allocator/tier_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)tensortier::parse_size_bytes(text);
  auto configs = tensortier::parse_tier_spec(text);
  if (!configs) {
    if (configs.status().message().empty()) std::abort();  // an error always says what is wrong
    return 0;
  }
  const std::string formatted = tensortier::format_tier_spec(configs.value());
  auto again = tensortier::parse_tier_spec(formatted);
  if (!again || tensortier::format_tier_spec(again.value()) != formatted) std::abort();
  return 0;
}
