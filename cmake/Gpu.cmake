# The GPU backend's toolchain (TENSORTIER_GPU, cmake/Options.cmake): the CUDA toolkit (nvcc and
# the shared runtime, CUDA::cudart) and cuDNN (its header and library, found by the versioned name
# too: a PyTorch wheel ships only libcudnn.so.9). Sets TENSORTIER_GPU_ENABLED.
set(TENSORTIER_GPU_ENABLED OFF)
if(NOT TENSORTIER_GPU STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  set(cudnn_hints $ENV{CUDNN_ROOT} ${CUDAToolkit_LIBRARY_ROOT} /usr/local/cuda)
  find_path(TENSORTIER_CUDNN_INCLUDE_DIR cudnn.h HINTS ${cudnn_hints} ${CUDAToolkit_INCLUDE_DIRS}
            PATH_SUFFIXES include)
  find_library(TENSORTIER_CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 HINTS ${cudnn_hints} ${CUDAToolkit_LIBRARY_DIR}
               PATH_SUFFIXES lib lib64)
  set(missing "")
  if(NOT CUDAToolkit_FOUND OR NOT CUDAToolkit_NVCC_EXECUTABLE)
    list(APPEND missing "the CUDA toolkit (nvcc)")
  endif()
  if(NOT TENSORTIER_CUDNN_INCLUDE_DIR OR NOT TENSORTIER_CUDNN_LIBRARY)
    list(APPEND missing "cuDNN (cudnn.h, libcudnn)")
  endif()
  list(JOIN missing " and " missing_text)
  if(missing_text STREQUAL "")
    set(TENSORTIER_GPU_ENABLED ON)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)  # Hopper: H100, H200
    endif()
    set(CMAKE_CUDA_COMPILER ${CUDAToolkit_NVCC_EXECUTABLE})
    enable_language(CUDA)
    # C++20 in .cu files, as in the rest (CMake 3.25 does not know nvcc's flag for it yet).
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    # cuDNN as a target: its headers as system includes (with the CUDA runtime's, which they include).
    add_library(tensortier::cudnn UNKNOWN IMPORTED)
    set_target_properties(tensortier::cudnn PROPERTIES IMPORTED_LOCATION "${TENSORTIER_CUDNN_LIBRARY}"
                          INTERFACE_INCLUDE_DIRECTORIES "${TENSORTIER_CUDNN_INCLUDE_DIR}"
                          INTERFACE_LINK_LIBRARIES CUDA::cudart)
    message(STATUS "GPU backend: CUDA ${CUDAToolkit_VERSION} (${CUDAToolkit_NVCC_EXECUTABLE}), cuDNN "
                   "${TENSORTIER_CUDNN_LIBRARY}, architectures ${CMAKE_CUDA_ARCHITECTURES}")
  elseif(TENSORTIER_GPU STREQUAL "ON")
    message(FATAL_ERROR "TENSORTIER_GPU=ON, and this machine lacks ${missing_text}, so the GPU backend cannot "
                        "be built: install them (or set CUDAToolkit_ROOT / CUDNN_ROOT), or use AUTO")
  else()
    message(STATUS "GPU backend: not built (${missing_text} not found; TENSORTIER_GPU=AUTO)")
  endif()
endif()
