// The backends a program's --backend flag names: "cpu" (oneDNN, cpu_backend()) and "cuda" (cuDNN
// and cuBLAS, dnn/cudnn/cudnn_backend.h, where this build has the GPU backend). One place, so that
// tensortier-train and tensortier-bench accept the same names and say the same things.
//
// Ownership: make_backend's result is the caller's; it borrows the runtime, which must outlive it.
// Thread safety: free functions; make_backend as CudnnBackend::create.
#pragma once

#include <memory>
#include <string_view>

#include "tensortier/dnn/backend.h"
#include "tensortier/runtime.h"

namespace tensortier::dnn {

// The backend named, on `runtime`: null for "cpu" (an Engine without a backend uses cpu_backend());
// the cuDNN backend on the runtime's device tier for "cuda". Errors: kInvalidArgument for another
// name; kUnavailable where this build has no cuda backend; CudnnBackend::create's (no device tier
// in the runtime, no GPU).
// `math` is the cuda backend's: "fp32" (FMA in fp32, the CPU backend's arithmetic) or "tf32" (tensor
// cores, as PyTorch's default on a GPU); the cpu backend has one. Errors also: kInvalidArgument for
// another math.
Result<std::unique_ptr<Backend>> make_backend(std::string_view name, Runtime& runtime,
                                              std::string_view math = "fp32");

}  // namespace tensortier::dnn
