// What the benchmarks print beside every figure measured on an emulated slow tier.
#pragma once

#include <string>

#include <fmt/format.h>

#include "tensortier/runtime.h"

namespace tensortier::bench {

// "tier 'NAME': emulated, <preset description>, <DRAM reference and its source>" for each emulated
// tier of the runtime, else "".
inline std::string emulated_note(const Runtime& rt) {
  std::string note;
  for (TierIndex t = 0; t < rt.tier_count(); ++t) {
    if (const CostModel* model = rt.tier(t).cost_model(); model != nullptr)
      note += fmt::format("{}tier '{}': emulated, {}, {}", note.empty() ? "" : "; ", rt.tier(t).name(),
                          model->describe(), model->reference());
  }
  return note;
}

}  // namespace tensortier::bench
