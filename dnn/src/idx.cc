// The IDX header parser (data.h), in a file of its own so that its fuzz target (tests/fuzz)
// builds it without oneDNN.
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tensortier/dnn/idx.h"

namespace tensortier::dnn {
namespace {

std::uint32_t big_endian(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

Result<std::vector<std::uint32_t>> parse_idx_header(std::span<const unsigned char> bytes, int rank,
                                                    const std::string& path) {
  if (rank < 1 || rank > 255) return invalid_argument(fmt::format("IDX rank {} is not 1..255", rank));
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(rank);
  if (bytes.size() < header || bytes[0] != 0 || bytes[1] != 0 || bytes[2] != 0x08 || bytes[3] != rank) {
    return invalid_argument(
        fmt::format("'{}' is not an IDX file of {}-D unsigned bytes (bad header)", path, rank));
  }
  std::vector<std::uint32_t> dims;
  std::size_t total = 1;
  for (int i = 0; i < rank; ++i) {
    dims.push_back(big_endian(&bytes[4 + 4 * static_cast<std::size_t>(i)]));
    // A product past the file's size (or past 64 bits, where it would wrap) is a corrupt header.
    if (__builtin_mul_overflow(total, std::size_t{dims.back()}, &total) || total > bytes.size()) {
      std::string shape;
      for (std::size_t k = 0; k < static_cast<std::size_t>(rank); ++k)
        shape += fmt::format("{}{}", k == 0 ? "" : " x ", big_endian(&bytes[4 + 4 * k]));
      return invalid_argument(
          fmt::format("'{}' is truncated or corrupt: its header's dims {} need more than the file's {} bytes",
                      path, shape, bytes.size()));
    }
  }
  if (bytes.size() != header + total) {
    return invalid_argument(
        fmt::format("'{}' is truncated or corrupt: {} bytes of data for dims that need {}", path,
                    bytes.size() - header, total));
  }
  return dims;
}

}  // namespace tensortier::dnn
