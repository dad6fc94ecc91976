# Build options. Each one's meaning is its help string.
# Warnings are errors wherever the CI environment variable is set (CI runs the README's own test
# command, so this is how that command gets -Werror there), and wherever asked for.
if(DEFINED ENV{CI})
  set(werror_default ON)
else()
  set(werror_default OFF)
endif()
option(TENSORTIER_WERROR "Treat compiler warnings as errors (default ON when $CI is set)" ${werror_default})
option(TENSORTIER_BUILD_TESTS "Build the GoogleTest suite under tests/" ON)
option(TENSORTIER_BUILD_BENCH "Build bench/ (demo and micro-benchmarks)" ON)
set(TENSORTIER_SANITIZE "" CACHE STRING
    "Sanitizer build: empty (none), 'address' (ASan + UBSan) or 'thread' (TSan)")
set_property(CACHE TENSORTIER_SANITIZE PROPERTY STRINGS "" address thread)
# CI builds the GPU backend or fails (its machines have the CUDA toolkit and cuDNN).
if(DEFINED ENV{CI})
  set(gpu_default ON)
else()
  set(gpu_default AUTO)
endif()
set(TENSORTIER_GPU ${gpu_default} CACHE STRING
    "The GPU backend (gpu/): AUTO (built where the CUDA toolkit and cuDNN are found), ON (required), OFF")
set_property(CACHE TENSORTIER_GPU PROPERTY STRINGS AUTO ON OFF)
set(TENSORTIER_TORCH AUTO CACHE STRING
    "tensortier.torch (python/): AUTO (built where a Python with PyTorch, its C++ headers and pybind11 are found), ON (required), OFF")
set_property(CACHE TENSORTIER_TORCH PROPERTY STRINGS AUTO ON OFF)
