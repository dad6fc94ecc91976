#include "tensortier/dnn/backend_by_name.h"

#include <fmt/format.h>

#ifdef TENSORTIER_WITH_CUDNN
#include "tensortier/dnn/cudnn/cudnn_backend.h"
#endif

namespace tensortier::dnn {

Result<std::unique_ptr<Backend>> make_backend(std::string_view name, Runtime& runtime) {
  if (name == "cpu") return std::unique_ptr<Backend>();
  if (name != "cuda") return invalid_argument(fmt::format("unknown backend '{}' (known: cpu, cuda)", name));
#ifdef TENSORTIER_WITH_CUDNN
  auto cuda = cudnn::CudnnBackend::create(runtime);
  if (!cuda) return cuda.status();
  return std::unique_ptr<Backend>(std::move(cuda).value());
#else
  (void)runtime;
  return unavailable(
      "backend cuda: this build of tensortier has no GPU backend (it was built without the CUDA toolkit and "
      "cuDNN: TENSORTIER_GPU); use the cpu backend");
#endif
}

}  // namespace tensortier::dnn
