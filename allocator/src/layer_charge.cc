#include "tensortier/allocator/layer_charge.h"

#include <algorithm>

#include "tensortier/allocator/cost_model.h"

namespace tensortier {

LayerCharge charge_layer(const ObjectAllocator& allocator, std::span<const std::uint64_t> read_bytes_by_tier,
                         std::span<const std::uint64_t> written_bytes_by_tier) {
  LayerCharge charge;
  charge.booked_ns_by_tier.assign(allocator.tier_count(), 0);
  const std::uint64_t start_ns = steady_now_ns();
  auto used = [&](TierIndex t) { return read_bytes_by_tier[t] != 0 || written_bytes_by_tier[t] != 0; };
  for (TierIndex t = 0; t < allocator.tier_count(); ++t) {
    if (!used(t)) continue;
    const CostModel& model = *allocator.tier(t).cost_model();
    charge.booked_ns_by_tier[t] = model.layer_charge_ns(read_bytes_by_tier[t], written_bytes_by_tier[t]);
    charge.booked_ns += charge.booked_ns_by_tier[t];
    charge.slow_read_bytes += read_bytes_by_tier[t];
    charge.slow_written_bytes += written_bytes_by_tier[t];
  }
  if (charge.booked_ns == 0) return charge;
  // Each tier's traffic ends with the charge unless the tier's timeline is busy longer.
  const std::uint64_t want_end_ns = start_ns + charge.booked_ns;
  std::uint64_t traffic_end_ns = 0;
  for (TierIndex t = 0; t < allocator.tier_count(); ++t) {
    if (!used(t)) continue;
    const std::uint64_t traffic =
        allocator.tier(t).cost_model()->slow_traffic_ns(read_bytes_by_tier[t], written_bytes_by_tier[t]);
    traffic_end_ns = std::max(
        traffic_end_ns,
        allocator.tier(t).timeline()->reserve(want_end_ns > traffic ? want_end_ns - traffic : 0, traffic));
  }
  wait_until_ns(std::max(traffic_end_ns, want_end_ns));
  charge.charged_ns = steady_now_ns() - start_ns;
  return charge;
}

}  // namespace tensortier
