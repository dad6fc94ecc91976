// Kernels of our own (kernels.cu): a pattern written and checked on the device, so a test or the
// device check can tell that bytes moved whole without copying them back to the host.
// Launches are asynchronous on `stream`; thread-safe as CUDA launches are.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "tensortier/gpu/cuda_api.h"

namespace tensortier::gpu {

// Writes word i of `count` 32-bit words as expected_word(i, seed).
CudaStatus launch_fill(void* device_words, std::size_t count, std::uint32_t seed, StreamHandle stream);
// Adds to *device_mismatches (device memory) the words that are not expected_word(i, seed).
CudaStatus launch_check(const void* device_words, std::size_t count, std::uint32_t seed,
                        unsigned long long* device_mismatches, StreamHandle stream);
// The pattern, for the host side.
std::uint32_t expected_word(std::size_t i, std::uint32_t seed);

}  // namespace tensortier::gpu
