// The few kernels of our own the GPU backend runs (cuDNN and cuBLAS have the layers): filling and
// checking memory on the device, for the device checks and tests.
#include "kernels.h"

namespace tensortier::gpu {
namespace {

__global__ void fill_words(std::uint32_t* words, std::size_t count, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    words[i] = seed ^ static_cast<std::uint32_t>(i * 2654435761u);
  }
}

__global__ void count_mismatches(const std::uint32_t* words, std::size_t count, std::uint32_t seed,
                                 unsigned long long* mismatches) {
  unsigned long long mine = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    mine += words[i] != (seed ^ static_cast<std::uint32_t>(i * 2654435761u)) ? 1 : 0;
  }
  if (mine != 0) atomicAdd(mismatches, mine);
}

cudaStream_t as_stream(StreamHandle h) {
  return reinterpret_cast<cudaStream_t>(h);
}

}  // namespace

CudaStatus launch_fill(void* device_words, std::size_t count, std::uint32_t seed, StreamHandle stream) {
  fill_words<<<264, 256, 0, as_stream(stream)>>>(static_cast<std::uint32_t*>(device_words), count, seed);
  return cudaGetLastError();
}

CudaStatus launch_check(const void* device_words, std::size_t count, std::uint32_t seed,
                        unsigned long long* device_mismatches, StreamHandle stream) {
  count_mismatches<<<264, 256, 0, as_stream(stream)>>>(static_cast<const std::uint32_t*>(device_words), count,
                                                       seed, device_mismatches);
  return cudaGetLastError();
}

std::uint32_t expected_word(std::size_t i, std::uint32_t seed) {
  return seed ^ static_cast<std::uint32_t>(i * 2654435761u);
}

}  // namespace tensortier::gpu
