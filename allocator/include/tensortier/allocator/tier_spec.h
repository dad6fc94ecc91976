// The tier spec: a one-line description of a machine's memory tiers, fast to slow.
//
//   spec  := entry ("," entry)*
//   entry := NAME "=" KIND (":" ARG)*
//   KIND and its ARGs:
//     dram[:SIZE]               DRAM: plain anonymous mappings under the default NUMA policy
//     numa:NODE[:SIZE]          memory bound to NUMA node NODE (libnuma mbind; move_pages-able)
//     daxkmem[:SIZE]            a CPU-less KMEM DAX node through memkind MEMKIND_DAX_KMEM
//     pmem:DIR[:SIZE]           a file-backed memkind kind on DIR (Optane App Direct, DAX fs)
//     emulated:PRESET[:SIZE]    DRAM charged as slow memory by a cost model (optane, cxl,
//                               remote-numa); see docs/EMULATION.md
//     cuda:DEVICE[:SIZE]        device memory of CUDA device DEVICE, one arena (the GPU
//                               backend's, gpu/: the host runtime does not open it)
//     pinned[:SIZE]             page-locked host memory for a CUDA device (gpu/, likewise)
//   SIZE  := a number with an optional unit: B, KiB, MiB, GiB, TiB (or K, M, G, T; powers of
//            1024). Omitted: the capacity the machine reports for that memory.
//
// Example: "fast=dram:8GiB,slow=emulated:optane:64GiB". The first entry is the fastest tier.
// docs/TIERS.md is the user's page for this grammar. Parsing is pure and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tensortier/status.h"

namespace tensortier {

// What backs a tier.
enum class TierKind { kDram, kNuma, kDaxKmem, kPmem, kEmulated, kCuda, kPinned };
// Device memory and pinned host memory: opened by the GPU backend (gpu/), never by open_tier.
constexpr bool is_gpu_kind(TierKind kind) {
  return kind == TierKind::kCuda || kind == TierKind::kPinned;
}

// The spec word of a kind: "dram", "numa", "daxkmem", "pmem", "emulated", "cuda", "pinned".
const char* to_string(TierKind kind);

// One parsed spec entry.
struct TierConfig {
  std::string name;  // the user's name for the tier ("fast", "slow", ...)
  TierKind kind = TierKind::kDram;
  std::uint64_t budget_bytes = 0;  // 0: no size given, use the capacity the machine reports
  int numa_node = -1;              // kNuma: the node
  int cuda_device = -1;            // kCuda: the device index
  std::string pmem_dir;            // kPmem: the directory backing the kind
  std::string preset;              // kEmulated: the cost-model preset name
};

// Parses a spec. Errors quote the offending entry and say what was expected.
Result<std::vector<TierConfig>> parse_tier_spec(std::string_view spec);

// Parses "64GiB", "512MiB", "4096"; errors name the text. Exposed for the CLI and tests.
Result<std::uint64_t> parse_size_bytes(std::string_view text);

// Writes configs back as a spec string (round-trips through parse_tier_spec).
std::string format_tier_spec(const std::vector<TierConfig>& configs);

}  // namespace tensortier
