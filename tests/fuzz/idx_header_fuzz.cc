// Fuzz target: the IDX header parser (idx.h). The first byte picks the rank (1..4), the rest is
// the file. Besides not crashing, dims it accepts must describe exactly the bytes that follow.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "tensortier/dnn/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const int rank = data[0] % 4 + 1;
  const std::span<const unsigned char> file(data + 1, size - 1);
  auto dims = tensortier::dnn::parse_idx_header(file, rank, "fuzz.idx");
  if (!dims) return 0;
  unsigned __int128 total = 1;
  for (std::uint32_t d : dims.value()) total *= d;
  if (dims->size() != static_cast<std::size_t>(rank) ||
      4 + 4 * static_cast<std::size_t>(rank) + total != file.size())
    std::abort();
  return 0;
}
