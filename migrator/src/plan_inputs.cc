// PlanInputs from a step profile, the segments of a page-granular plan, and dead bytes.
#include <algorithm>
#include <map>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "tensortier/allocator/offset_planner.h"
#include "tensortier/migrator/plan_inputs.h"

namespace tensortier::migrator {

namespace {

using Index = std::unordered_map<ObjectId, std::size_t>;  // profile id -> index in inputs.objects

// Objects of a page or more become PlanObjects (indexed by id); small ones add to the reserve: each
// group's peak of small bytes in whole chunks. Objects of an earlier step are keyed by their id.
void add_objects(const profiler::StepProfile& profile, PlanInputs& in, Index& index) {
  std::map<GroupId, std::vector<std::int64_t>> small_delta;  // group -> live small bytes change per boundary
  for (const profiler::ObjectProfile& o : profile.objects) {
    const std::uint32_t born = o.born_at_layer.value_or(0);
    const std::uint32_t freed = std::min(o.freed_at_layer.value_or(in.layers), in.layers);
    if (o.small || o.reserved_bytes == 0) {
      auto& delta = small_delta[o.group];
      delta.resize(in.layers + 2, 0);
      delta[born] += static_cast<std::int64_t>(o.bytes);
      delta[freed + 1] -= static_cast<std::int64_t>(o.bytes);
      continue;
    }
    PlanObject p;
    // Made in an earlier step and alive in this one (gradients kept across steps; a program that
    // frees the last iteration's tensors after the next step began): named by its id, as any object
    // made outside the step; under the key it shares, a dead move of it discarded the other's bytes.
    p.key = plan_key(o.key, o.id, !o.born_at_layer);
    p.bytes = o.reserved_bytes;  // whole pages already
    p.born = born;
    p.freed = freed;
    p.persistent = !o.born_at_layer && !o.freed_at_layer;
    p.short_lived = o.lifetime == profiler::LifetimeClass::kShort;
    p.host_pinned = o.host_pinned;
    p.tier = o.tier;
    index.emplace(o.id, in.objects.size());
    in.objects.push_back(std::move(p));
  }
  for (const auto& [group, delta] : small_delta) {
    std::int64_t live = 0, peak = 0;
    for (std::int64_t d : delta) peak = std::max(peak, live += d);
    in.small_reserve_bytes += round_up(static_cast<std::uint64_t>(peak), kGroupChunkBytes);
  }
}

// Objects these accesses (host code's, outside the layers) touched are accessed undeclared.
void mark_undeclared(const std::vector<profiler::SpanAccessProfile>& accesses, PlanInputs& in,
                     const Index& index) {
  for (const profiler::SpanAccessProfile& a : accesses) {
    if (auto it = index.find(a.id); !a.is_group && it != index.end())
      in.objects[it->second].accessed_undeclared = true;
  }
}

// Layer l's time on fast memory (the unprofiled time where the profile has it, less the emulated
// charge) and the objects it declares read or written.
void add_layer_uses(const profiler::LayerProfile& layer, std::uint32_t l, PlanInputs& in,
                    const Index& index) {
  const std::uint64_t measured =
      layer.unprofiled_duration_ns != 0 ? layer.unprofiled_duration_ns : layer.duration_ns;
  in.layer_ns[l] = measured > layer.emulated_charge_ns ? measured - layer.emulated_charge_ns : 0;
  for (const auto* ids : {&layer.declared_reads, &layer.declared_writes}) {
    for (ObjectId id : *ids) {
      auto it = index.find(id);
      if (it == index.end()) continue;
      auto& uses = in.objects[it->second].uses;
      if (uses.empty() || uses.back() != l) uses.push_back(l);
      auto& writes = in.objects[it->second].writes;
      if (ids == &layer.declared_writes && (writes.empty() || writes.back() != l)) writes.push_back(l);
    }
  }
}

// Overwrites: declared written, not declared read, and every page written with none read first
// (as the profile saw them). Spans touched by a layer that did not declare them, or by host code
// before it, are accessed undeclared.
void add_layer_accesses(const profiler::LayerProfile& layer, std::uint32_t l, PlanInputs& in,
                        const Index& index) {
  for (const profiler::SpanAccessProfile& a : layer.accesses) {
    if (a.is_group) continue;
    auto it = index.find(a.id);
    if (it == index.end()) continue;
    PlanObject& o = in.objects[it->second];
    const bool read = std::ranges::find(layer.declared_reads, a.id) != layer.declared_reads.end();
    const bool written = std::ranges::find(layer.declared_writes, a.id) != layer.declared_writes.end();
    if (!read && !written) {
      o.accessed_undeclared = true;
      continue;
    }
    const std::uint64_t units = a.page_bytes == 0 ? 0 : (o.bytes + a.page_bytes - 1) / a.page_bytes;
    if (written && !read && a.pages_read == 0 && units != 0 && a.pages_written >= units &&
        (o.overwrites.empty() || o.overwrites.back() != l))
      o.overwrites.push_back(l);
  }
  mark_undeclared(layer.accesses_before, in, index);
}

}  // namespace

Result<PlanInputs> inputs_from_profile(const profiler::StepProfile& profile, TierIndex fast, TierIndex slow,
                                       std::uint64_t fast_budget_bytes) {
  if (profile.layers.empty()) return invalid_argument("plan: the step profile has no layers");
  if (fast == slow)
    return invalid_argument(fmt::format("plan: the fast and the slow tier are both tier {}", fast));
  if (fast_budget_bytes == 0) return invalid_argument("plan: a fast budget of 0 bytes");
  PlanInputs in;
  in.layers = static_cast<std::uint32_t>(profile.layers.size());
  in.fast = fast;
  in.slow = slow;
  in.fast_budget_bytes = fast_budget_bytes;
  Index index;
  add_objects(profile, in, index);
  in.layer_ns.resize(in.layers);
  for (std::uint32_t l = 0; l < in.layers; ++l) {
    add_layer_uses(profile.layers[l], l, in, index);
    add_layer_accesses(profile.layers[l], l, in, index);
  }
  mark_undeclared(profile.accesses_after, in, index);
  std::vector<PlannedBuffer> lives;
  for (const PlanObject& o : in.objects) {
    if (o.freed > o.born || o.persistent) lives.push_back({o.born, std::max(o.freed, o.born + 1), o.bytes});
  }
  in.peak_bytes = max_live_bytes(lives);
  return in;
}

void set_rates(PlanInputs& in, const TierRates& r) {
  if (r.slow_read_gbps > 0 && r.slow_write_gbps > 0) {
    in.move_in_gbps = r.slow_read_gbps;
    in.move_out_gbps = r.slow_write_gbps;
    in.slow_access_ns_per_byte = r.slow_access_ns_per_byte;
  }
  if (r.fast_read_gbps > 0 && r.fast_write_gbps > 0) {
    const double threads = std::max(1U, r.cpu_threads);
    in.mover_cpu_ns_per_byte = threads / r.fast_read_gbps + threads / r.fast_write_gbps;
    in.mover_steals_compute = r.mover_steals_compute;
  }
  in.clean_moves_out_free = r.clean_moves_out_free;
  in.dead_moves_free = r.dead_moves_free;
  in.ready_memory = r.ready_memory;
  in.room_wait_ns = r.room_wait_ns;
  in.timed_program_s = r.timed_program_s;
  in.tightened_program_s = r.tightened_program_s;
  in.set_link_rates(r.link_to_fast_gbps, r.link_to_slow_gbps);
}

bool bytes_dead_at(const PlanInputs& in, const PlanObject& o, std::uint32_t boundary) {
  if (o.accessed_undeclared) return false;
  auto next = std::ranges::lower_bound(o.uses, boundary);
  // No use left in the step: dead for an object freed in it. Not across the step's end: code
  // between steps (a gradient's norm logged now and then) may read what the profile never saw.
  if (next == o.uses.end()) return !o.persistent && o.freed < in.layers;
  return std::ranges::binary_search(o.overwrites, *next);
}

PlanInputs in_segments(const PlanInputs& inputs) {
  PlanInputs out = inputs;
  out.objects.clear();
  out.clean_moves_out_free = false;  // a segment keeps no shadow
  for (const PlanObject& o : inputs.objects) {
    const std::uint64_t segments = segment_count(o.bytes);
    if (segments <= 1 || segments > kMostSegments || (o.key & kPartMask) != 0) {
      out.objects.push_back(o);
      continue;
    }
    for (std::uint32_t k = 0; k < segments; ++k) {
      PlanObject part = o;
      part.key = part_key(o.key, k);
      part.bytes = std::min<std::uint64_t>(kSegmentBytes, o.bytes - std::uint64_t{k} * kSegmentBytes);
      out.objects.push_back(std::move(part));
    }
  }
  return out;
}

}  // namespace tensortier::migrator
