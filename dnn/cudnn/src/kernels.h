// The cuDNN backend's kernels of its own, where cuDNN and cuBLAS have none (kernels.cu): softmax
// cross-entropy with its gradient, and SGD with momentum and weight decay. Each computes what the
// CPU backend's loops do, in the same order per element (no contracted multiply-adds), so the two
// backends agree to float rounding of the layers before them.
// Launches are asynchronous on `stream` (a cudaStream_t); they return cudaGetLastError() as an int.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tensortier::dnn::cudnn {

// Row i of `logits` (n x classes): loss_rows[i] = log-sum-exp - logit of labels[i] (in double),
// correct[i] = 1 where its first top logit is its label; with `diff`, diff (n x classes) =
// (softmax - one-hot) / n. Labels must be in 0..classes-1 (the caller checks them).
int launch_softmax_xent(const float* logits, const std::int32_t* labels, int n, int classes,
                        double* loss_rows, std::int32_t* correct, float* diff, std::uintptr_t stream);

// As torch.optim.SGD: g = grad + decay * w; v = momentum * v + g; w -= lr * v.
int launch_sgd(float* w, float* v, const float* grad, std::size_t count, float lr, float momentum,
               float decay, std::uintptr_t stream);

}  // namespace tensortier::dnn::cudnn
