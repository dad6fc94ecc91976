// Runtime: tier resolution, object placement and step/layer marks (see runtime.h).
#include "tensortier/runtime.h"

#include <charconv>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <tuple>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "tensortier/allocator/tier_spec.h"
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

Result<profiler::ProfileOptions> resolve_profile_options(const RuntimeOptions& options) {
  profiler::ProfileOptions p = options.profile;
  if (const char* env = std::getenv("TENSORTIER_PROFILE"); env != nullptr && *env != '\0') {
    const std::string_view value(env);
    std::uint64_t step = 0;
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), step);
    if (value == "off") {
      p.enabled = false;
    } else if (error == std::errc() && end == value.data() + value.size()) {
      p.enabled = true;
      p.step = step;
    } else {
      return invalid_argument(fmt::format(
          "TENSORTIER_PROFILE='{}': use 'off' or the step to profile (0-based, e.g. 1 for the second)",
          value));
    }
  }
  if (const char* env = std::getenv("TENSORTIER_PROFILE_GRANULARITY"); env != nullptr && *env != '\0') {
    Result<std::uint64_t> bytes = parse_size_bytes(env);
    if (!bytes || (*bytes != profiler::kSmallPageBytes && *bytes != profiler::kHugePageBytes)) {
      return invalid_argument(fmt::format("TENSORTIER_PROFILE_GRANULARITY='{}': use 4KiB or 2MiB", env));
    }
    p.granularity_bytes = *bytes;
  }
  if (const char* env = std::getenv("TENSORTIER_PROFILE_JSON"); env != nullptr && *env != '\0')
    p.json_path = env;
  TENSORTIER_RETURN_IF_ERROR(profiler::validate(p));
  return p;
}

Result<std::unique_ptr<Runtime>> Runtime::create(const RuntimeOptions& options) {
  auto resolved = resolve_tier_spec(options);
  if (!resolved) return resolved.status();
  Result<profiler::ProfileOptions> profile = resolve_profile_options(options);
  if (!profile) return profile.status();
  auto& [configs, source] = resolved.value();
  std::vector<std::unique_ptr<Tier>> tiers;
  for (const TierConfig& config : configs) {
    Result<std::unique_ptr<Tier>> tier = open_tier(config);
    if (!tier) return tier.status();
    spdlog::info("tier {}", tier.value()->describe());
    tiers.push_back(std::move(tier).value());
  }
  return std::unique_ptr<Runtime>(
      new Runtime(std::move(tiers), format_tier_spec(configs), source, std::move(profile).value()));
}

Runtime::Runtime(std::vector<std::unique_ptr<Tier>> tiers, std::string spec, std::string source,
                 profiler::ProfileOptions profile_options)
    : allocator_(std::move(tiers)),
      spec_(std::move(spec)),
      spec_source_(std::move(source)),
      profile_options_(std::move(profile_options)) {
  // Every allocator call that can release memory comes through allocate()/free(), which hold
  // profiler_mutex_: the observer may read profiler_.
  allocator_.set_release_observer([this](const SpanView& span) {
    if (profiler_ != nullptr) profiler_->on_release(span);
  });
}

Runtime::~Runtime() {
  std::lock_guard lock(profiler_mutex_);
  profiler_.reset();  // unprotects every object before the allocator releases them
}

std::string Runtime::describe() const {
  std::string out;
  for (TierIndex t = 0; t < tier_count(); ++t) out += tier(t).describe() + '\n';
  return out;
}

Result<ObjectInfo> Runtime::allocate(std::string_view name, std::size_t bytes, GroupId group,
                                     TierIndex preferred) {
  std::lock_guard lock(profiler_mutex_);
  Result<ObjectInfo> info = allocator_.allocate(name, bytes, group, preferred);
  if (info && profiler_ != nullptr) {
    SpanView span;
    if (allocator_.lookup(info->address, &span)) profiler_->on_allocate(info.value(), span);
  }
  return info;
}

Status Runtime::free(const void* address) {
  std::lock_guard lock(profiler_mutex_);
  if (profiler_ != nullptr) {
    SpanView span;
    Result<ObjectId> id = allocator_.id_of(address);
    if (id && allocator_.lookup(address, &span)) profiler_->on_free(id.value(), span);
  }
  return allocator_.free(address);
}

Status Runtime::set_profile_options(const profiler::ProfileOptions& options) {
  TENSORTIER_RETURN_IF_ERROR(profiler::validate(options));
  if (in_step_) return failed_precondition("set_profile_options inside a step (call it between steps)");
  profile_options_ = options;
  return Status::ok();
}

std::shared_ptr<const profiler::StepProfile> Runtime::profile_of(std::uint64_t signature) const {
  auto it = profiles_.find(signature);
  return it != profiles_.end() ? it->second : nullptr;
}

// Due when asked for, or when the last ProfileOptions::step steps had one signature that has no
// profile yet (the coming step is predicted to be like them).
bool Runtime::profile_due() const {
  if (profile_requested_) return true;
  if (!profile_options_.enabled || run_length_ < profile_options_.step) return false;
  return !profiles_.contains(last_signature_) && !profile_failed_.contains(last_signature_);
}

void Runtime::start_profile() {
  if (!counters_ && profile_options_.counters) counters_ = profiler::Counters::open();
  std::vector<std::pair<ObjectInfo, SpanView>> live;
  std::lock_guard lock(profiler_mutex_);
  for (ObjectInfo& info : allocator_.objects()) {
    SpanView span;
    if (allocator_.lookup(info.address, &span)) live.emplace_back(std::move(info), span);
  }
  allocator_.reset_peak_live_bytes();
  auto lookup = [](const void* context, const void* address, SpanView* out) {
    return static_cast<const Runtime*>(context)->lookup(address, out);
  };
  auto started = profiler::StepProfiler::start(profile_options_, lookup, this, steps_completed_.load(), live,
                                               counters_.get());
  if (!started) {
    spdlog::warn("step {} is not profiled: {}", steps_completed_.load(), started.status().message());
    profile_failed_.insert(last_signature_);
    return;
  }
  profiler_ = std::move(started).value();
}

void Runtime::finish_profile(std::uint64_t step_duration_ns) {
  std::unique_ptr<profiler::StepProfiler> done;
  {
    std::lock_guard lock(profiler_mutex_);
    done = std::move(profiler_);
  }
  auto profile = std::make_shared<const profiler::StepProfile>(
      done->finish(signature_, step_duration_ns, allocator_.peak_live_bytes()));
  done.reset();
  std::uint64_t unprofiled_ns = 0;
  for (const profiler::LayerProfile& l : profile->layers) unprofiled_ns += l.unprofiled_duration_ns;
  spdlog::info(
      "profiled step {}: {} layers, {} objects, {} faults, peak {} at layer {}; {:.1f} ms (unprofiled {:.1f} "
      "ms)",
      profile->step, profile->layers.size(), profile->objects.size(), profile->faults,
      format_bytes(profile->peak_live_bytes), profile->peak_at_layer,
      static_cast<double>(step_duration_ns) / 1e6, static_cast<double>(unprofiled_ns) / 1e6);
  if (!profile_options_.json_path.empty()) {
    // The first profile goes to the path as given; a later one (a new kind of step) beside it.
    std::string path = profile_options_.json_path;
    if (!profiles_.empty()) {
      const std::size_t dot = path.rfind('.');
      const std::string suffix = fmt::format(".step{}", profile->step);
      path = dot != std::string::npos && path.find('/', dot) == std::string::npos
                 ? path.substr(0, dot) + suffix + path.substr(dot)
                 : path + suffix;
    }
    if (Status s = profiler::write_json(*profile, path); !s.is_ok()) {
      spdlog::warn("{}", s.message());
    } else {
      spdlog::info("profile of step {} written to {}", profile->step, path);
    }
  }
  profiles_[signature_] = profile;
  last_profile_ = std::move(profile);
}

Status Runtime::step_begin() {
  if (in_step_) return failed_precondition("step_begin: the previous step has not ended (call step_end)");
  in_step_ = true;
  current_step_.clear();
  signature_ = 0xcbf29ce484222325ull;
  if (profile_due()) {
    profile_requested_ = false;
    start_profile();
  }
  step_start_ns_ = now_ns();
  return Status::ok();
}

Status Runtime::step_end() {
  if (!in_step_) return failed_precondition("step_end without step_begin");
  if (in_layer_) {
    return failed_precondition(
        fmt::format("step_end inside layer '{}' (call layer_end first)", current_step_.back().name));
  }
  const std::uint64_t duration_ns = now_ns() - step_start_ns_;
  in_step_ = false;
  ++steps_completed_;
  run_length_ = (signature_ == last_signature_ && steps_completed_ > 1) ? run_length_ + 1 : 1;
  last_signature_ = signature_;
  if (profiler_ != nullptr) finish_profile(duration_ns);
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
  std::vector<std::size_t> sizes;
  for (const auto& [pointers, ids, role] :
       {std::tuple{reads, &record.reads, "reads"}, std::tuple{writes, &record.writes, "writes"}}) {
    const std::size_t bad = allocator_.ids_of(pointers, ids, &sizes);
    if (bad != pointers.size()) {
      return not_found(fmt::format("layer '{}' {} {}, which is not the start of a live object", name, role,
                                   pointers[bad]));
    }
  }
  // The step's signature: layer names and argument sizes, FNV-1a.
  auto mix = [this](std::uint64_t value) { signature_ = (signature_ ^ value) * 0x100000001b3ull; };
  mix(std::hash<std::string_view>{}(name));
  mix(record.reads.size());
  for (std::size_t bytes : sizes) mix(bytes);
  if (profiler_ != nullptr) {
    const std::uint64_t before_ns = record.index < last_step_.size() && last_step_[record.index].name == name
                                        ? last_step_[record.index].duration_ns
                                        : 0;
    profiler_->on_layer_begin(name, record.reads, record.writes, allocator_.live_bytes(), before_ns);
  }
  current_step_.push_back(std::move(record));
  in_layer_ = true;
  layer_start_ns_ = now_ns();
  return Status::ok();
}

Status Runtime::layer_end() {
  if (!in_layer_) return failed_precondition("layer_end without layer_begin");
  current_step_.back().duration_ns = now_ns() - layer_start_ns_;
  in_layer_ = false;
  if (profiler_ != nullptr) profiler_->on_layer_end(current_step_.back().duration_ns);
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
