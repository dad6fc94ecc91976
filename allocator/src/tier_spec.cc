// Parser for the tier spec grammar documented in tier_spec.h and docs/TIERS.md.
#include "tensortier/allocator/tier_spec.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <optional>
#include <set>
#include <string>

#include <fmt/format.h>

#include "tensortier/allocator/tier.h"  // kPageBytes
#include "tensortier/enum_names.h"

namespace tensortier {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t pos = s.find(sep, start);
    parts.push_back(trim(s.substr(start, pos == std::string_view::npos ? pos : pos - start)));
    if (pos == std::string_view::npos) return parts;
    start = pos + 1;
  }
}

struct UnitEntry {
  std::string_view suffix;
  std::uint64_t multiplier;
};
// Longest suffixes first so "GiB" wins over "B".
constexpr std::array<UnitEntry, 9> kUnits{{{"TiB", 1ULL << 40},
                                           {"GiB", 1ULL << 30},
                                           {"MiB", 1ULL << 20},
                                           {"KiB", 1ULL << 10},
                                           {"T", 1ULL << 40},
                                           {"G", 1ULL << 30},
                                           {"M", 1ULL << 20},
                                           {"K", 1ULL << 10},
                                           {"B", 1}}};

// The largest unit that states `bytes` exactly: 8GiB, 1536MiB, 4097B.
std::string format_size(std::uint64_t bytes) {
  for (const auto& unit : kUnits) {
    if (unit.suffix.size() == 3 && bytes % unit.multiplier == 0) {
      return fmt::format("{}{}", bytes / unit.multiplier, unit.suffix);
    }
  }
  return fmt::format("{}B", bytes);
}

// A node or device number (0, 1, ...), or -1 for anything else.
int parse_index(std::string_view text) {
  int index = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), index);
  return ec == std::errc() && end == text.data() + text.size() && index >= 0 ? index : -1;
}

constexpr EnumName<TierKind> kTierKindNames[] = {
    {TierKind::kDram, "dram"},     {TierKind::kNuma, "numa"},         {TierKind::kDaxKmem, "daxkmem"},
    {TierKind::kPmem, "pmem"},     {TierKind::kEmulated, "emulated"}, {TierKind::kCuda, "cuda"},
    {TierKind::kPinned, "pinned"},
};

// The argument a kind takes between its name and the SIZE: reads it into the config (an error
// message where it is wrong) and writes it back.
using ReadArgument = std::string (*)(TierConfig& config, std::string_view arg);
using WriteArgument = std::string (*)(const TierConfig& config);

std::string read_numa_node(TierConfig& config, std::string_view arg) {
  config.numa_node = parse_index(arg);
  return config.numa_node < 0 ? fmt::format("'{}' is not a NUMA node number (0, 1, ...)", arg) : "";
}
std::string read_pmem_dir(TierConfig& config, std::string_view arg) {
  config.pmem_dir = std::string(arg);
  return arg.empty() ? "pmem needs a directory: pmem:/mnt/pmem0[:SIZE]" : "";
}
std::string read_preset(TierConfig& config, std::string_view arg) {
  config.preset = std::string(arg);
  return "";
}
std::string read_cuda_device(TierConfig& config, std::string_view arg) {
  config.cuda_device = parse_index(arg);
  return config.cuda_device < 0 ? fmt::format("'{}' is not a CUDA device number (0, 1, ...)", arg) : "";
}

// Each kind's grammar: KIND[:ARGUMENT][:SIZE], the argument required where the kind has one.
struct KindGrammar {
  TierKind kind;
  const char* usage;  // what the kind takes, for an error
  ReadArgument read;  // nullptr: no argument
  WriteArgument write;
};
constexpr KindGrammar kKindGrammars[] = {
    {TierKind::kDram, "an optional SIZE: dram[:SIZE]", nullptr, nullptr},
    {TierKind::kNuma, "a node number and an optional SIZE: numa:NODE[:SIZE]", read_numa_node,
     [](const TierConfig& c) { return std::to_string(c.numa_node); }},
    {TierKind::kDaxKmem, "an optional SIZE: daxkmem[:SIZE]", nullptr, nullptr},
    {TierKind::kPmem, "a directory and an optional SIZE: pmem:DIR[:SIZE]", read_pmem_dir,
     [](const TierConfig& c) { return c.pmem_dir; }},
    {TierKind::kEmulated, "a preset and an optional SIZE: emulated:PRESET[:SIZE]", read_preset,
     [](const TierConfig& c) { return c.preset; }},
    {TierKind::kCuda, "a device number and an optional SIZE: cuda:DEVICE[:SIZE]", read_cuda_device,
     [](const TierConfig& c) { return std::to_string(c.cuda_device); }},
    {TierKind::kPinned, "an optional SIZE: pinned[:SIZE]", nullptr, nullptr},
};

constexpr bool every_kind_has_a_grammar() {
  for (const EnumName<TierKind>& named : kTierKindNames) {
    if (std::ranges::none_of(kKindGrammars, [&](const KindGrammar& g) { return g.kind == named.value; }))
      return false;
  }
  return true;
}
static_assert(every_kind_has_a_grammar(), "a tier kind in kTierKindNames has no row in kKindGrammars");

const KindGrammar& grammar_of(TierKind kind) {
  return *std::ranges::find(kKindGrammars, kind, &KindGrammar::kind);  // there: the assert above
}

}  // namespace

const char* to_string(TierKind kind) {
  return name_of(kind, kTierKindNames).data();  // the table's names are literals: NUL-terminated
}

Result<std::uint64_t> parse_size_bytes(std::string_view text) {
  text = trim(text);
  if (text.empty()) return invalid_argument("empty size: write a number with a unit, e.g. 8GiB");
  if (text.front() == '-') {
    return invalid_argument(fmt::format("negative size '{}': sizes are bytes >= 0, e.g. 8GiB", text));
  }
  std::uint64_t multiplier = 1;
  std::string_view digits = text;
  for (const auto& unit : kUnits) {
    if (text.size() > unit.suffix.size() && text.ends_with(unit.suffix)) {
      multiplier = unit.multiplier;
      digits = trim(text.substr(0, text.size() - unit.suffix.size()));
      break;
    }
  }
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec == std::errc::result_out_of_range && end == digits.data() + digits.size()) {
    return invalid_argument(fmt::format("size '{}' is too large: it does not fit in 64 bits", text));
  }
  if (ec != std::errc() || end != digits.data() + digits.size() || digits.empty()) {
    return invalid_argument(fmt::format(
        "unparsable size '{}': write a whole number with an optional unit B, KiB, MiB, GiB or TiB "
        "(e.g. 512MiB)",
        text));
  }
  if (value != 0 && multiplier > UINT64_MAX / value) {
    return invalid_argument(fmt::format("size '{}' is too large: it does not fit in 64 bits", text));
  }
  return value * multiplier;
}

Result<std::vector<TierConfig>> parse_tier_spec(std::string_view spec) {
  if (trim(spec).empty()) {
    return invalid_argument(
        "empty tier spec: write e.g. \"fast=dram:8GiB,slow=emulated:optane:64GiB\" "
        "(docs/TIERS.md)");
  }
  std::vector<TierConfig> configs;
  std::set<std::string, std::less<>> names;
  for (std::string_view entry : split(spec, ',')) {
    auto error = [&](const std::string& what) {
      return invalid_argument(fmt::format("tier spec entry \"{}\": {}", entry, what));
    };
    const std::size_t eq = entry.find('=');
    if (eq == std::string_view::npos) return error("expected NAME=KIND[:ARGS], e.g. fast=dram:8GiB");
    TierConfig config;
    config.name = std::string(trim(entry.substr(0, eq)));
    if (config.name.empty()) return error("the tier has no name before '='");
    if (!names.insert(config.name).second) return error("the name '" + config.name + "' is used twice");
    const std::vector<std::string_view> args = split(entry.substr(eq + 1), ':');
    const std::string_view kind = args[0];
    const std::optional<TierKind> known = value_named(kind, kTierKindNames);
    if (!known)
      return error(fmt::format("unknown tier kind '{}' (known: {})", kind, names_of(kTierKindNames)));
    config.kind = *known;
    const KindGrammar& grammar = grammar_of(config.kind);
    // KIND, its argument where it has one, then an optional SIZE (read first, as before the table).
    const std::size_t required = grammar.read != nullptr ? 1 : 0;
    if (args.size() < 1 + required || args.size() > 2 + required) {
      return error(fmt::format("'{}' takes {}", kind, grammar.usage));
    }
    if (args.size() == 2 + required) {
      auto size = parse_size_bytes(args[1 + required]);
      if (!size) return error(size.status().message());
      if (size.value() == 0) return error("a budget of 0 bytes holds nothing; give a size > 0");
      if (size.value() < kPageBytes) {
        return error(
            fmt::format("a budget of {} bytes is less than one {} KiB page, which is the least any "
                        "object takes; give at least 4KiB",
                        size.value(), kPageBytes / 1024));
      }
      config.budget_bytes = size.value();
    }
    if (grammar.read != nullptr) {
      if (const std::string wrong = grammar.read(config, args[1]); !wrong.empty()) return error(wrong);
    }
    configs.push_back(std::move(config));
  }
  return configs;
}

std::string format_tier_spec(const std::vector<TierConfig>& configs) {
  std::string out;
  for (const TierConfig& c : configs) {
    if (!out.empty()) out += ',';
    out += c.name + '=' + to_string(c.kind);
    if (const WriteArgument write = grammar_of(c.kind).write; write != nullptr) out += ':' + write(c);
    if (c.budget_bytes != 0) out += ':' + format_size(c.budget_bytes);
  }
  return out;
}

}  // namespace tensortier
