// The CPU backend (backend.h): oneDNN layers, and the loss, gradient sums and SGD as host loops.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "tensortier/dnn/backend.h"

namespace tensortier::dnn {
namespace {

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu (oneDNN 2.6)"; }

  Result<std::unique_ptr<Layer>> make_layer(const LayerSpec& spec) override {
    return make_onednn_layer(spec);
  }

  // Written here: oneDNN 2.6 has no loss primitive, and this is N x classes floats (a
  // log-sum-exp per row, in double for the sum).
  Result<StepResult> softmax_cross_entropy(Engine& engine, const Tensor& logits, const Tensor& labels,
                                           const Tensor* diff) override {
    const auto n = static_cast<std::size_t>(logits.dims()[0]);
    const auto classes = static_cast<std::size_t>(logits.dims()[1]);
    if (labels.bytes() != n * sizeof(std::int32_t))
      return invalid_argument("labels do not match the batch size");
    StepResult result;
    result.count = n;
    std::vector<const Tensor*> writes;
    if (diff != nullptr) writes.push_back(diff);
    Status bad_label = Status::ok();
    TENSORTIER_RETURN_IF_ERROR(engine.host_layer("loss", {&logits, &labels}, writes, [&] {
      // Read pinned, inside the layer: a policy may move the labels between layers.
      const auto* label = static_cast<const std::int32_t*>(labels.address());
      for (std::size_t i = 0; i < n && bad_label.is_ok(); ++i) {
        if (label[i] < 0 || static_cast<std::size_t>(label[i]) >= classes)
          bad_label = invalid_argument(
              fmt::format("label {} of sample {} is outside 0..{}", label[i], i, classes - 1));
      }
      if (!bad_label.is_ok()) return;  // nothing written
      double total = 0;
      const float* all_logits = logits.data();
      float* all_diff = diff != nullptr ? diff->data() : nullptr;
      for (std::size_t i = 0; i < n; ++i) {
        const float* row = all_logits + i * classes;
        const auto target = static_cast<std::size_t>(label[i]);
        const float top = *std::max_element(row, row + classes);
        double sum = 0;
        for (std::size_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(row[c] - top));
        const double log_sum = std::log(sum) + top;
        total += log_sum - row[target];
        if (static_cast<std::size_t>(std::max_element(row, row + classes) - row) == target) ++result.correct;
        if (all_diff == nullptr) continue;
        float* d = all_diff + i * classes;
        for (std::size_t c = 0; c < classes; ++c) {
          const double p = std::exp(static_cast<double>(row[c]) - log_sum);
          d[c] = static_cast<float>((p - (target == c ? 1.0 : 0.0)) / static_cast<double>(n));
        }
      }
      result.loss = total / static_cast<double>(n);
    }));
    if (!bad_label.is_ok()) return bad_label;
    return result;
  }

  Status accumulate(Engine& engine, std::string_view layer, const Tensor& sum, const Tensor& more) override {
    return engine.host_layer(layer, {&sum, &more}, {&sum}, [&] {
      float* to = sum.data();
      const float* from = more.data();
      for (std::size_t e = 0, n = sum.elements(); e < n; ++e) to[e] += from[e];
    });
  }

  // As torch.optim.SGD: g = grad + wd * w; v = m * v + g; w -= lr * v. Weights and momentum are
  // read, then written: declared in both.
  Status sgd_update(Engine& engine, Param& p, const SgdOptions& sgd) override {
    return engine.host_layer("sgd." + p.value.name(), {&p.grad, &p.value, &p.momentum},
                             {&p.value, &p.momentum}, [&] {
                               float* w = p.value.data();
                               float* v = p.momentum.data();
                               const float* g = p.grad.data();
                               const float wd = p.decay ? sgd.weight_decay : 0.0F;
                               for (std::size_t e = 0, n = p.value.elements(); e < n; ++e) {
                                 v[e] = sgd.momentum * v[e] + (g[e] + wd * w[e]);
                                 w[e] -= sgd.learning_rate * v[e];
                               }
                             });
  }
};

}  // namespace

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace tensortier::dnn
