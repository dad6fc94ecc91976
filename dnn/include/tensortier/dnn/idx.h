// The IDX file format's header (the Fashion-MNIST files): dims and the size check, apart from
// the gzip reading and the dataset around it (data.h), so that it can be fuzzed on its own.
//
// Thread safety: a pure function.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tensortier/status.h"

namespace tensortier::dnn {

// The dims of an IDX file of unsigned bytes with `rank` dimensions, whose whole (decompressed)
// content is `bytes`; the data follows the 4 + 4 x rank header bytes. A bad magic, a rank other
// than `rank`, or dims whose product differs from the data's size (or overflows) is an error
// naming `path`.
Result<std::vector<std::uint32_t>> parse_idx_header(std::span<const unsigned char> bytes, int rank,
                                                    const std::string& path);

}  // namespace tensortier::dnn
