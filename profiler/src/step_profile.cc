// StepProfile helpers and its JSON form (docs/PROFILE.md).
#include "tensortier/profiler/step_profile.h"

#include <algorithm>
#include <stdexcept>

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

std::vector<SpanAccessProfile> accesses_from(const json& array) {
  std::vector<SpanAccessProfile> out;
  for (const json& a : array) {
    SpanAccessProfile s;
    s.id = a.at("id").get<std::uint64_t>();
    s.is_group = a.at("is_group").get<bool>();
    s.page_bytes = a.at("page_bytes").get<std::uint64_t>();
    s.pages_read = a.at("pages_read").get<std::uint64_t>();
    s.pages_written = a.at("pages_written").get<std::uint64_t>();
    s.faults = a.at("faults").get<std::uint64_t>();
    s.touches = a.at("touches").get<double>();
    s.coarse = a.at("coarse").get<bool>();
    out.push_back(s);
  }
  return out;
}

std::optional<std::uint32_t> optional_layer_from(const json& j) {
  return j.is_null() ? std::nullopt : std::optional<std::uint32_t>(j.get<std::uint32_t>());
}

LifetimeClass lifetime_from(const std::string& name) {
  for (LifetimeClass c :
       {LifetimeClass::kPersistent, LifetimeClass::kLong, LifetimeClass::kShort, LifetimeClass::kCrossing}) {
    if (to_string(c) == name) return c;
  }
  throw std::invalid_argument("unknown lifetime class '" + name + "'");
}

ObjectProfile object_from(const json& j) {
  ObjectProfile o;
  o.id = j.at("id").get<ObjectId>();
  o.key = j.at("key").get<ObjectKey>();
  o.name = j.at("name").get<std::string>();
  o.bytes = j.at("bytes").get<std::uint64_t>();
  o.reserved_bytes = j.at("reserved_bytes").get<std::uint64_t>();
  o.group = j.at("group").get<GroupId>();
  o.tier = j.at("tier").get<TierIndex>();
  o.small = j.at("small").get<bool>();
  o.born_at_layer = optional_layer_from(j.at("born_at_layer"));
  o.freed_at_layer = optional_layer_from(j.at("freed_at_layer"));
  o.lifetime = lifetime_from(j.at("lifetime").get<std::string>());
  o.host_pinned = j.value("host_pinned", false);
  return o;
}

LayerProfile layer_from(const json& j) {
  LayerProfile l;
  l.index = j.at("index").get<std::uint32_t>();
  l.name = j.at("name").get<std::string>();
  l.duration_ns = j.at("duration_ns").get<std::uint64_t>();
  l.unprofiled_duration_ns = j.at("unprofiled_duration_ns").get<std::uint64_t>();
  l.emulated_charge_ns = j.at("emulated_charge_ns").get<std::uint64_t>();
  l.declared_reads = j.at("declared_reads").get<std::vector<ObjectId>>();
  l.declared_writes = j.at("declared_writes").get<std::vector<ObjectId>>();
  l.accesses = accesses_from(j.at("accesses"));
  l.accesses_before = accesses_from(j.at("accesses_before"));
  l.live_bytes = j.at("live_bytes").get<std::uint64_t>();
  l.allocator_live_bytes = j.at("allocator_live_bytes").get<std::uint64_t>();
  for (const json& c : j.at("counters"))
    l.counters.push_back(
        {c.at("name").get<std::string>(), c.at("source").get<std::string>(), c.at("value").get<double>()});
  return l;
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

Result<StepProfile> from_json(std::string_view text) {
  try {
    const json j = json::parse(text);
    if (j.value("schema", "") != "tensortier.step_profile/1")
      return invalid_argument(
          fmt::format("not a tensortier.step_profile/1 (schema: {})", j.value("schema", "none")));
    StepProfile p;
    p.step = j.at("step").get<std::uint64_t>();
    p.signature = std::stoull(j.at("signature").get<std::string>(), nullptr, 16);
    p.granularity_bytes = j.at("granularity_bytes").get<std::uint64_t>();
    p.sample_interval_us = j.at("sample_interval_us").get<std::uint32_t>();
    p.sample_fraction = j.at("sample_fraction").get<double>();
    p.duration_ns = j.at("duration_ns").get<std::uint64_t>();
    p.faults = j.at("faults").get<std::uint64_t>();
    p.peak_live_bytes = j.at("peak_live_bytes").get<std::uint64_t>();
    p.peak_at_layer = j.at("peak_at_layer").get<std::uint32_t>();
    p.allocator_peak_live_bytes = j.at("allocator_peak_live_bytes").get<std::uint64_t>();
    p.counter_source = j.at("counter_source").get<std::string>();
    p.write_tracking = j.at("write_tracking").get<std::string>();
    p.access_source = j.at("access_source").get<std::string>();
    p.notes = j.at("notes").get<std::vector<std::string>>();
    for (const json& o : j.at("objects")) p.objects.push_back(object_from(o));
    for (const json& l : j.at("layers")) p.layers.push_back(layer_from(l));
    p.accesses_after = accesses_from(j.at("accesses_after"));
    std::ranges::sort(p.objects, [](const ObjectProfile& a, const ObjectProfile& b) { return a.id < b.id; });
    return p;
  } catch (const std::exception& e) {  // nlohmann's parse and type errors, a bad lifetime or signature
    return invalid_argument(fmt::format("not a step profile: {}", e.what()));
  }
}

Status write_json(const StepProfile& profile, const std::string& path) {
  return write_file_replacing(path, to_json(profile) + '\n', "the profile");
}

}  // namespace tensortier::profiler
