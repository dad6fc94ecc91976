// The DRAM-bandwidth cache's parser (cost_model.h), in a file of its own so that its fuzz target
// (tests/fuzz) builds it without the rest of the allocator.
#include <cmath>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "tensortier/allocator/cost_model.h"

namespace tensortier {

std::optional<FastBandwidth> parse_bandwidth_cache(std::string_view json_text, const std::string& cpu_model,
                                                   std::uint64_t memory_bytes, unsigned threads) {
  const nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  auto number = [&](const char* key) -> std::optional<double> {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number()) return std::nullopt;
    return it->get<double>();
  };
  auto model = j.find("cpu_model");
  const auto m = number("memory_bytes"), t = number("threads"), r = number("read_gbps"),
             w = number("write_gbps");
  if (model == j.end() || !model->is_string() || model->get<std::string>() != cpu_model || !m || !t || !r ||
      !w)
    return std::nullopt;
  if (*m != static_cast<double>(memory_bytes) || *t != static_cast<double>(threads)) return std::nullopt;
  if (!(*r > 0 && std::isfinite(*r) && *w > 0 && std::isfinite(*w))) return std::nullopt;
  return FastBandwidth{*r, *w, threads, ""};
}

}  // namespace tensortier
