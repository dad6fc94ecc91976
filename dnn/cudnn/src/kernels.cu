// The cuDNN backend's kernels of its own (see kernels.h).
#include <cuda_runtime.h>

#include "kernels.h"

namespace tensortier::dnn::cudnn {
namespace {

// One thread a row: the models' classes are few (10), and a row's sums stay in one thread's order.
__global__ void softmax_xent(const float* logits, const std::int32_t* labels, int n, int classes,
                             double* loss_rows, std::int32_t* correct, float* diff) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float* row = logits + static_cast<std::size_t>(i) * classes;
  const int target = labels[i];
  float* d = diff != nullptr ? diff + static_cast<std::size_t>(i) * classes : nullptr;
  if (target < 0 || target >= classes) {  // said, not read: the row's loss is the label, flagged
    loss_rows[i] = target;
    correct[i] = -1;
    for (int c = 0; d != nullptr && c < classes; ++c) d[c] = 0;
    return;
  }
  int top_index = 0;
  for (int c = 1; c < classes; ++c) {
    if (row[c] > row[top_index]) top_index = c;
  }
  const float top = row[top_index];
  double sum = 0;
  for (int c = 0; c < classes; ++c) sum += exp(static_cast<double>(__fsub_rn(row[c], top)));
  const double log_sum = log(sum) + top;
  loss_rows[i] = log_sum - row[target];
  correct[i] = top_index == target ? 1 : 0;
  if (d == nullptr) return;
  for (int c = 0; c < classes; ++c) {
    const double p = exp(static_cast<double>(row[c]) - log_sum);
    d[c] = static_cast<float>((p - (target == c ? 1.0 : 0.0)) / static_cast<double>(n));
  }
}

__global__ void sgd(float* w, float* v, const float* grad, std::size_t count, float lr, float momentum,
                    float decay) {
  const std::size_t e = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= count) return;
  const float g = __fadd_rn(grad[e], __fmul_rn(decay, w[e]));
  v[e] = __fadd_rn(__fmul_rn(momentum, v[e]), g);
  w[e] = __fsub_rn(w[e], __fmul_rn(lr, v[e]));
}

constexpr int kThreads = 256;

}  // namespace

int launch_softmax_xent(const float* logits, const std::int32_t* labels, int n, int classes, double* loss_rows,
                        std::int32_t* correct, float* diff, std::uintptr_t stream) {
  const int blocks = (n + kThreads - 1) / kThreads;
  softmax_xent<<<blocks, kThreads, 0, reinterpret_cast<cudaStream_t>(stream)>>>(logits, labels, n, classes,
                                                                                 loss_rows, correct, diff);
  return static_cast<int>(cudaGetLastError());
}

int launch_sgd(float* w, float* v, const float* grad, std::size_t count, float lr, float momentum, float decay,
               std::uintptr_t stream) {
  if (count == 0) return 0;
  const auto blocks = static_cast<unsigned>((count + kThreads - 1) / kThreads);
  sgd<<<blocks, kThreads, 0, reinterpret_cast<cudaStream_t>(stream)>>>(w, v, grad, count, lr, momentum, decay);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace tensortier::dnn::cudnn
