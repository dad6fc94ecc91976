// What the cuDNN backend's layers share (see cudnn_layer.h).
#include "cudnn_layer.h"

#include <cuda_runtime_api.h>

#include <fmt/format.h>

namespace tensortier::dnn::cudnn {

using dnnl::memory;

Status cublas_status(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return Status::ok();
  const std::string text =
      fmt::format("{}: {} ({})", call, cublasGetStatusString(status), static_cast<int>(status));
  if (status == CUBLAS_STATUS_NOT_INITIALIZED || status == CUBLAS_STATUS_ARCH_MISMATCH)
    return unavailable(text);
  if (status == CUBLAS_STATUS_INVALID_VALUE || status == CUBLAS_STATUS_NOT_SUPPORTED)
    return invalid_argument(text);
  return internal_error(text);
}

Status cuda_call_status(int error, const char* call) {
  if (error == 0) return Status::ok();
  const auto e = static_cast<cudaError_t>(error);
  const std::string text = fmt::format("{}: {} ({})", call, cudaGetErrorString(e), error);
  if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) return unavailable(text);
  return internal_error(text);
}

Status device_layer(Engine& engine, std::string_view name, const std::vector<const Tensor*>& reads,
                    const std::vector<const Tensor*>& writes, const std::function<Status()>& body) {
  std::vector<const Tensor*> r, w;
  for (const Tensor* t : reads)
    if (t != nullptr && !t->empty()) r.push_back(t);
  for (const Tensor* t : writes)
    if (t != nullptr && !t->empty()) w.push_back(t);
  Status result = Status::ok();
  TENSORTIER_RETURN_IF_ERROR(engine.host_layer(name, r, w, [&] { result = body(); }));
  return result;
}

Result<Tensor> workspace(Engine& engine, const std::string& name, std::size_t bytes) {
  if (bytes == 0) return Tensor();
  const auto floats = static_cast<memory::dim>((bytes + sizeof(float) - 1) / sizeof(float));
  return engine.allocate(name, plain_desc({floats}), kScratchpads, /*zero=*/false);
}

Status plain_param(Engine& engine, const std::string& name, const Dims& dims, Param& p) {
  const dnnl::memory::desc desc = plain_desc(dims);
  return make_param(engine, name, desc, desc, p);
}

Status set_param(Engine& engine, Param& p, const std::vector<float>& values) {
  if (values.size() != p.value.elements()) {
    return invalid_argument(
        fmt::format("{}: {} values for {} elements", p.value.name(), values.size(), p.value.elements()));
  }
  return engine.write_from_host({&p.value}, [&](const std::vector<void*>& bytes) {
    std::copy(values.begin(), values.end(), static_cast<float*>(bytes[0]));
  });
}

Status init_weight_and_bias(Engine& engine, const std::string& layer, Param& weight, Param* bias,
                            std::size_t fan_in, std::uint64_t seed) {
  TENSORTIER_RETURN_IF_ERROR(set_param(
      engine, weight, uniform_init_values(weight.value.elements(), fan_in, seed, layer + ".weight")));
  if (bias == nullptr) return Status::ok();
  return set_param(engine, *bias, uniform_init_values(bias->value.elements(), fan_in, seed, layer + ".bias"));
}

}  // namespace tensortier::dnn::cudnn
