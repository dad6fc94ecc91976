// StepProfile helpers and its JSON form (docs/PROFILE.md).
#include "tensortier/profiler/step_profile.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tensortier/enum_names.h"
#include "tensortier/write_file.h"

namespace tensortier::profiler {
namespace {

using nlohmann::json;

json optional_layer(const std::optional<std::uint32_t>& layer) {
  return layer ? json(*layer) : json(nullptr);
}

json accesses_json(const std::vector<SpanAccessProfile>& accesses) {
  json out = json::array();
  for (const SpanAccessProfile& a : accesses) {
    out.push_back({{"id", a.id},
                   {"is_group", a.is_group},
                   {"page_bytes", a.page_bytes},
                   {"pages_read", a.pages_read},
                   {"pages_written", a.pages_written},
                   {"faults", a.faults},
                   {"touches", a.touches},
                   {"coarse", a.coarse}});
  }
  return out;
}

}  // namespace

std::string_view to_string(LifetimeClass c) {
  static constexpr EnumName<LifetimeClass> kNames[] = {
      {LifetimeClass::kPersistent, "persistent"},
      {LifetimeClass::kLong, "long"},
      {LifetimeClass::kShort, "short"},
      {LifetimeClass::kCrossing, "crossing"},
  };
  return name_of(c, kNames);
}

LifetimeClass classify(const std::optional<std::uint32_t>& born, const std::optional<std::uint32_t>& freed,
                       std::uint32_t layer_count) {
  if (!born && !freed) return LifetimeClass::kPersistent;
  if (!born || !freed) return LifetimeClass::kCrossing;
  const std::uint32_t span = *freed - std::min(*born, *freed);
  return span * 10 > layer_count ? LifetimeClass::kLong : LifetimeClass::kShort;
}

const ObjectProfile* StepProfile::object(ObjectId id) const {
  auto it = std::lower_bound(objects.begin(), objects.end(), id,
                             [](const ObjectProfile& o, ObjectId value) { return o.id < value; });
  return it != objects.end() && it->id == id ? &*it : nullptr;
}

std::vector<ObjectKey> StepProfile::keys() const {
  std::vector<ObjectKey> out;
  out.reserve(objects.size());
  for (const ObjectProfile& o : objects) out.push_back(o.key);
  return out;
}

std::string to_json(const StepProfile& p, int indent) {
  json objects = json::array();
  for (const ObjectProfile& o : p.objects) {
    objects.push_back({{"id", o.id},
                       {"key", o.key},
                       {"name", o.name},
                       {"bytes", o.bytes},
                       {"reserved_bytes", o.reserved_bytes},
                       {"group", o.group},
                       {"tier", o.tier},
                       {"small", o.small},
                       {"born_at_layer", optional_layer(o.born_at_layer)},
                       {"freed_at_layer", optional_layer(o.freed_at_layer)},
                       {"lifetime", to_string(o.lifetime)},
                       {"host_pinned", o.host_pinned}});
  }
  json layers = json::array();
  for (const LayerProfile& l : p.layers) {
    json counters = json::array();
    for (const Counter& c : l.counters)
      counters.push_back({{"name", c.name}, {"source", c.source}, {"value", c.value}});
    layers.push_back({{"index", l.index},
                      {"name", l.name},
                      {"duration_ns", l.duration_ns},
                      {"unprofiled_duration_ns", l.unprofiled_duration_ns},
                      {"emulated_charge_ns", l.emulated_charge_ns},
                      {"declared_reads", l.declared_reads},
                      {"declared_writes", l.declared_writes},
                      {"accesses", accesses_json(l.accesses)},
                      {"accesses_before", accesses_json(l.accesses_before)},
                      {"live_bytes", l.live_bytes},
                      {"allocator_live_bytes", l.allocator_live_bytes},
                      {"counters", counters}});
  }
  const json out = {{"schema", "tensortier.step_profile/1"},
                    {"step", p.step},
                    {"signature", fmt::format("{:016x}", p.signature)},
                    {"granularity_bytes", p.granularity_bytes},
                    {"sample_interval_us", p.sample_interval_us},
                    {"sample_fraction", p.sample_fraction},
                    {"duration_ns", p.duration_ns},
                    {"faults", p.faults},
                    {"peak_live_bytes", p.peak_live_bytes},
                    {"peak_at_layer", p.peak_at_layer},
                    {"allocator_peak_live_bytes", p.allocator_peak_live_bytes},
                    {"counter_source", p.counter_source},
                    {"write_tracking", p.write_tracking},
                    {"access_source", p.access_source},
                    {"notes", p.notes},
                    {"objects", objects},
                    {"layers", layers},
                    {"accesses_after", accesses_json(p.accesses_after)}};
  return out.dump(indent);
}

Status write_json(const StepProfile& profile, const std::string& path) {
  return write_file_replacing(path, to_json(profile) + '\n', "the profile");
}

}  // namespace tensortier::profiler
