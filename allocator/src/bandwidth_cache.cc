// The DRAM reference's cache (cost_model.h): its parser and writer, and the rule that says when an
// entry is measured again. In a file of its own so that its fuzz target (tests/fuzz) builds it
// without the rest of the allocator.
#include <cmath>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tensortier/allocator/cost_model.h"

namespace tensortier {

std::optional<CachedBandwidth> parse_bandwidth_cache(std::string_view json_text) {
  const nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  auto number = [&](const char* key) -> std::optional<double> {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number()) return std::nullopt;
    return it->get<double>();
  };
  auto text = [&](const char* key) -> std::optional<std::string> {
    auto it = j.find(key);
    if (it == j.end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
  };
  const auto m = number("memory_bytes"), t = number("threads"), r = number("read_gbps"),
             w = number("write_gbps"), at = number("measured_at_s");
  const auto cpu = text("cpu_model"), kernel = text("kernel");
  if (!cpu || !m || !t || !r || !w) return std::nullopt;
  if (!(*r > 0 && std::isfinite(*r) && *w > 0 && std::isfinite(*w))) return std::nullopt;
  if (!(*m >= 0 && *m < 1.8e19 && *t >= 1 && *t < 65536)) return std::nullopt;
  CachedBandwidth entry;
  entry.bandwidth = {*r, *w, static_cast<unsigned>(*t), ""};
  entry.conditions = {*cpu, static_cast<std::uint64_t>(*m), static_cast<unsigned>(*t), kernel.value_or("")};
  // An entry of before the date was kept has none: as old as can be.
  entry.measured_at_s = at && std::isfinite(*at) && std::abs(*at) < 1e15 ? static_cast<std::int64_t>(*at) : 0;
  return entry;
}

std::string bandwidth_cache_text(const CachedBandwidth& entry) {
  return nlohmann::json{
             {"read_gbps", entry.bandwidth.read_gbps},        {"write_gbps", entry.bandwidth.write_gbps},
             {"threads", entry.conditions.threads},           {"cpu_model", entry.conditions.cpu_model},
             {"memory_bytes", entry.conditions.memory_bytes}, {"kernel", entry.conditions.kernel},
             {"measured_at_s", entry.measured_at_s}}
             .dump(2) +
         '\n';
}

std::string bandwidth_cache_stale(const std::optional<CachedBandwidth>& cached,
                                  const BandwidthConditions& now, std::int64_t now_s,
                                  const std::optional<FastBandwidth>& probe) {
  if (!cached) return "no cached reference";
  const BandwidthConditions& then = cached->conditions;
  if (then.cpu_model != now.cpu_model) return fmt::format("the CPU is another ('{}')", then.cpu_model);
  if (then.memory_bytes != now.memory_bytes) return "the memory size is another";
  if (then.threads != now.threads) return fmt::format("it was measured with {} threads", then.threads);
  if (then.kernel != now.kernel) return fmt::format("the kernel is another ('{}')", then.kernel);
  if (now_s - cached->measured_at_s > kBandwidthCacheMaxAgeS || cached->measured_at_s > now_s)
    return "it is more than a day old";
  if (probe) {
    const FastBandwidth& c = cached->bandwidth;
    for (const auto& [what, was, is] : {std::tuple{"read", c.read_gbps, probe->read_gbps},
                                        std::tuple{"write", c.write_gbps, probe->write_gbps}}) {
      if (is > was * (1 + kBandwidthProbeMargin)) {
        return fmt::format("it was measured under load: {} {:.1f} GB/s cached, {:.1f} GB/s in a probe now",
                           what, was, is);
      }
    }
  }
  return "";
}

}  // namespace tensortier
