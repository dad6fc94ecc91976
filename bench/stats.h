// Small statistics the benchmarks share.
#pragma once

#include <algorithm>
#include <vector>

namespace tensortier::bench {

// The median of `v` (0 for none): the benchmarks report medians of repetitions.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace tensortier::bench
