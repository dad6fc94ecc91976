// Runtime: tier resolution, object placement and step/layer marks (see runtime.h).
#include "tensortier/runtime.h"

#include <chrono>
#include <cstdlib>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "tensortier/allocator/topology.h"

namespace tensortier {
namespace {

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

constexpr std::string_view kEmulatedHint = "TENSORTIER_TIERS=fast=dram:4GiB,slow=emulated:optane:16GiB";

}  // namespace

Result<std::pair<std::vector<TierConfig>, std::string>> resolve_tier_spec(const RuntimeOptions& options) {
  std::string text = options.tier_spec;
  std::string source = "options";
  if (text.empty()) {
    if (const char* env = std::getenv("TENSORTIER_TIERS"); env != nullptr && *env != '\0') {
      text = env;
      source = "TENSORTIER_TIERS";
    }
  }
  if (!text.empty()) {
    auto configs = parse_tier_spec(text);
    if (!configs) return Status(configs.status().code(), source + ": " + configs.status().message());
    return std::pair{std::move(configs).value(), source};
  }
  Result<Topology> topology = discover_topology();
  if (!topology) return topology.status();
  if (topology->nodes.empty()) {
    return unavailable(fmt::format("hwloc found no NUMA node; give a tier spec, e.g. {}", kEmulatedHint));
  }
  if (topology->nodes.size() == 1) {
    spdlog::info("one memory tier found (NUMA node {}, {}); to add an emulated slow tier set {}",
                 topology->nodes[0].os_index, format_bytes(topology->nodes[0].capacity_bytes), kEmulatedHint);
  }
  return std::pair{tiers_from_topology(topology.value()),
                   fmt::format("hwloc discovery (ranked by {})", topology->ranking_basis)};
}

Result<std::unique_ptr<Runtime>> Runtime::create(const RuntimeOptions& options) {
  auto resolved = resolve_tier_spec(options);
  if (!resolved) return resolved.status();
  auto& [configs, source] = resolved.value();
  std::vector<std::unique_ptr<Tier>> tiers;
  for (const TierConfig& config : configs) {
    Result<std::unique_ptr<Tier>> tier = open_tier(config);
    if (!tier) return tier.status();
    spdlog::info("tier {}", tier.value()->describe());
    tiers.push_back(std::move(tier).value());
  }
  return std::unique_ptr<Runtime>(new Runtime(std::move(tiers), format_tier_spec(configs), source));
}

Runtime::Runtime(std::vector<std::unique_ptr<Tier>> tiers, std::string spec, std::string source)
    : allocator_(std::move(tiers)), spec_(std::move(spec)), spec_source_(std::move(source)) {}

Runtime::~Runtime() = default;

std::string Runtime::describe() const {
  std::string out;
  for (TierIndex t = 0; t < tier_count(); ++t) out += tier(t).describe() + '\n';
  return out;
}

Result<ObjectInfo> Runtime::allocate(std::string_view name, std::size_t bytes, GroupId group,
                                     TierIndex preferred) {
  return allocator_.allocate(name, bytes, group, preferred);
}

Status Runtime::free(const void* address) {
  return allocator_.free(address);
}

Status Runtime::step_begin() {
  if (in_step_) return failed_precondition("step_begin: the previous step has not ended (call step_end)");
  in_step_ = true;
  current_step_.clear();
  return Status::ok();
}

Status Runtime::step_end() {
  if (!in_step_) return failed_precondition("step_end without step_begin");
  if (in_layer_) {
    return failed_precondition(
        fmt::format("step_end inside layer '{}' (call layer_end first)", current_step_.back().name));
  }
  in_step_ = false;
  ++steps_completed_;
  last_step_.swap(current_step_);
  return Status::ok();
}

Status Runtime::layer_begin(std::string_view name, std::span<const void* const> reads,
                            std::span<const void* const> writes) {
  if (!in_step_)
    return failed_precondition(fmt::format("layer_begin('{}') outside a step (call step_begin)", name));
  if (in_layer_) {
    return failed_precondition(fmt::format("layer_begin('{}') inside layer '{}' (layers do not nest)", name,
                                           current_step_.back().name));
  }
  LayerRecord record;
  record.name = std::string(name);
  record.index = static_cast<std::uint32_t>(current_step_.size());
  auto resolve = [&](std::span<const void* const> pointers, std::vector<ObjectId>& ids,
                     const char* role) -> Status {
    for (const void* p : pointers) {
      Result<ObjectId> id = allocator_.id_of(p);
      if (!id) {
        return not_found(
            fmt::format("layer '{}' {} {}, which is not the start of a live object", name, role, p));
      }
      ids.push_back(id.value());
    }
    return Status::ok();
  };
  if (Status s = resolve(reads, record.reads, "reads"); !s.is_ok()) return s;
  if (Status s = resolve(writes, record.writes, "writes"); !s.is_ok()) return s;
  current_step_.push_back(std::move(record));
  in_layer_ = true;
  layer_start_ns_ = now_ns();
  return Status::ok();
}

Status Runtime::layer_end() {
  if (!in_layer_) return failed_precondition("layer_end without layer_begin");
  current_step_.back().duration_ns = now_ns() - layer_start_ns_;
  in_layer_ = false;
  return Status::ok();
}

RuntimeStats Runtime::stats() const {
  RuntimeStats s;
  s.tiers = allocator_.usage();
  s.steps_completed = steps_completed_.load();
  s.live_objects = allocator_.live_objects();
  return s;
}

}  // namespace tensortier
