// Which of cuDNN's ranked convolution algorithms a layer runs (conv_layer.cc): the first candidate
// cuDNN's heuristics rank (cudnnGetConvolution*Algorithm_v7) that ran, computes in the math mode
// asked, is deterministic where asked, and needs no more workspace than the limit, so that no
// layer's workspace takes a large share of the device tier the budget holds. Header-only so that
// it is checked without a GPU (tests/gpu/cudnn_descriptors_test.cc). Thread safety: pure.
#pragma once

#include <cstddef>

#include <cudnn.h>
#include <fmt/format.h>

#include "tensortier/dnn/cudnn/descriptors.h"
#include "tensortier/status.h"

namespace tensortier::dnn::cudnn {

struct AlgorithmNeeds {
  bool deterministic = true;
  MathMode math = MathMode::kFma;
  std::size_t workspace_limit_bytes = 0;  // 0: none
};

inline bool math_fits(cudnnMathType_t type, MathMode math) {
  return math == MathMode::kTensorCores || type == CUDNN_DEFAULT_MATH || type == CUDNN_FMA_MATH;
}

// The first of `count` ranked candidates `perf` (cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t)
// that meets `needs`; kUnavailable naming `what` and the needs where none does.
template <typename Perf>
Result<Perf> pick_algorithm(const Perf* perf, int count, const AlgorithmNeeds& needs, const char* what) {
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS || !math_fits(perf[i].mathType, needs.math)) continue;
    if (needs.deterministic && perf[i].determinism != CUDNN_DETERMINISTIC) continue;
    if (needs.workspace_limit_bytes != 0 && perf[i].memory > needs.workspace_limit_bytes) continue;
    return perf[i];
  }
  return unavailable(
      fmt::format("cuDNN offers no {} algorithm for this shape{}{}", what,
                  needs.deterministic ? " that is deterministic" : "",
                  needs.workspace_limit_bytes != 0
                      ? fmt::format(" within a workspace of {} bytes (the backend's workspace_limit_bytes)",
                                    needs.workspace_limit_bytes)
                      : std::string()));
}

}  // namespace tensortier::dnn::cudnn
