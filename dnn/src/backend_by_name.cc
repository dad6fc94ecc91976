#include "tensortier/dnn/backend_by_name.h"

#include <fmt/format.h>

#include "tensortier/load_module.h"

namespace tensortier::dnn {

Result<std::unique_ptr<Backend>> make_backend(std::string_view name, Runtime& runtime,
                                              std::string_view math) {
  if (math != "fp32" && math != "tf32")
    return invalid_argument(fmt::format("unknown math '{}' (known: fp32, tf32)", math));
  if (name == "cpu") return std::unique_ptr<Backend>();
  if (name != "cuda") return invalid_argument(fmt::format("unknown backend '{}' (known: cpu, cuda)", name));
#ifdef TENSORTIER_CUDNN_MODULE
  // The module (dnn/cudnn/, with cuDNN and cuBLAS) is loaded now, for this run alone; installed
  // beside libtensortier_dnn.
  Result<void*> make =
      load_module_symbol(TENSORTIER_CUDNN_MODULE, TENSORTIER_CUDNN_MODULE_BUILD,
                         reinterpret_cast<const void*>(&cpu_backend), "tensortier_dnn_make_cudnn_backend");
  if (!make) return unavailable("backend cuda: " + make.status().message());
  using Make = void (*)(Runtime*, bool tf32, Result<std::unique_ptr<Backend>>*);
  Result<std::unique_ptr<Backend>> made = unavailable("backend cuda: its module made nothing");
  reinterpret_cast<Make>(make.value())(&runtime, math == "tf32", &made);
  return made;
#else
  (void)runtime;
  return unavailable(
      "backend cuda: this build of tensortier has no GPU backend (it was built without the CUDA toolkit and "
      "cuDNN: TENSORTIER_GPU); use the cpu backend");
#endif
}

}  // namespace tensortier::dnn
