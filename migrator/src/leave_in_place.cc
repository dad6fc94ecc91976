// leave_in_place and StayPut: no plan moves an object that code the runtime cannot see coming
// touches (PlanObject::stays), whatever the policy (see plan.h).
#include <algorithm>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

#include "tensortier/migrator/plan.h"

namespace tensortier::migrator {
namespace {

// The boundaries an object is alive at, as a span [first, last] (persistent: the whole step).
std::pair<std::uint32_t, std::uint32_t> alive_boundaries(const PlanObject& o, std::uint32_t layers) {
  if (o.persistent) return {0, layers};
  return {std::min(o.born, layers), std::min(o.freed, layers)};  // `freed` counted too: safe side
}

// Whether `o` fits on the fast tier at every boundary it is alive at, beside `fast_bytes`.
bool fits_fast(const PlanObject& o, const PlanInputs& in, const std::vector<std::uint64_t>& fast_bytes) {
  const auto [first, last] = alive_boundaries(o, in.layers);
  for (std::uint32_t b = first; b <= last && b < fast_bytes.size(); ++b) {
    if (fast_bytes[b] + o.bytes + in.small_reserve_bytes > in.fast_budget_bytes) return false;
  }
  return true;
}

}  // namespace

std::size_t leave_in_place(Plan& plan, const PlanInputs& inputs) {
  // Whole objects that stay and that the plan moves (a part key names a segment of one).
  std::unordered_set<ObjectKey> moved;
  for (const PlannedMove& m : plan.moves) moved.insert(whole_key(m.key));
  std::unordered_set<ObjectKey> fixed;
  for (const PlanObject& o : inputs.objects) {
    if (o.stays() && moved.contains(o.key) && !plan.region_offsets.contains(o.key)) fixed.insert(o.key);
  }
  if (fixed.empty()) return 0;
  plan.left_in_place.insert(plan.left_in_place.end(), fixed.begin(), fixed.end());
  std::ranges::sort(plan.left_in_place);
  std::erase_if(plan.moves, [&](const PlannedMove& m) { return fixed.contains(whole_key(m.key)); });
  // First every part of them slow (valid: it only takes bytes off the fast tier), then each back
  // on the fast tier, largest first, where it fits for its whole life.
  const PlanInputs played = plan.segment_bytes != 0 ? in_segments(inputs) : inputs;
  std::vector<const PlanObject*> parts;
  for (const PlanObject& o : played.objects) {
    if (!fixed.contains(whole_key(o.key))) continue;
    (o.persistent ? plan.start : plan.birth)[o.key] = played.slow;
    parts.push_back(&o);
  }
  (void)simulate(plan, inputs);
  std::vector<std::uint64_t> fast_bytes = plan.fast_bytes_by_boundary;
  std::ranges::stable_sort(parts,
                           [](const PlanObject* a, const PlanObject* b) { return a->bytes > b->bytes; });
  for (const PlanObject* o : parts) {
    if (!fits_fast(*o, played, fast_bytes)) continue;
    (o->persistent ? plan.start : plan.birth)[o->key] = played.fast;
    const auto [first, last] = alive_boundaries(*o, played.layers);
    for (std::uint32_t b = first; b <= last && b < fast_bytes.size(); ++b) fast_bytes[b] += o->bytes;
  }
  return fixed.size();
}

StayPut::StayPut(const PlanInputs& inputs) {
  for (const PlanObject& o : inputs.objects) {
    if (!o.persistent || !o.stays()) continue;
    objects_.push_back(&o);
    bytes_ += o.bytes;
    if (o.tier == inputs.fast) fast_bytes_ += o.bytes;
  }
}

Result<PlanInputs> StayPut::policy_view(const PlanInputs& inputs) const {
  if (objects_.empty()) return inputs;
  if (fast_bytes_ + inputs.small_reserve_bytes >= inputs.fast_budget_bytes) {
    return failed_precondition(fmt::format(
        "{} persistent objects that code outside the layers touches unpinned stay where they are, {} bytes "
        "of them on the fast tier: with the small objects' reserve ({} bytes) that leaves nothing of the "
        "fast "
        "budget ({} bytes) to plan; pin them around those accesses (pin_objects, tt_pin) or give a larger "
        "budget",
        objects_.size(), fast_bytes_, inputs.small_reserve_bytes, inputs.fast_budget_bytes));
  }
  PlanInputs view = inputs;
  std::erase_if(view.objects, [](const PlanObject& o) { return o.persistent && o.stays(); });
  view.fast_budget_bytes -= fast_bytes_;
  view.peak_bytes -= std::min(view.peak_bytes, bytes_);  // alive at every boundary, the peak's too
  return view;
}

void StayPut::put_back(Plan& plan) const {
  PlanInputs parts;  // a page-granular plan is played over segments: each starts where its object is
  for (const PlanObject* o : objects_) {
    plan.start[o->key] = o->tier;
    plan.stay_put.push_back(o->key);
    if (plan.segment_bytes != 0) parts.objects.push_back(*o);
  }
  for (const PlanObject& part : in_segments(parts).objects) plan.start[part.key] = part.tier;
  std::ranges::sort(plan.stay_put);
}

}  // namespace tensortier::migrator
