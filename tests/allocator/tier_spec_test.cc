// The tier spec grammar: good specs parse to the right configs, bad ones name the bad part.
#include "tensortier/allocator/tier_spec.h"
#include "tensortier/allocator/tier.h"
#include "tensortier/enum_names.h"

#include <gtest/gtest.h>

namespace tensortier {
namespace {

TEST(TierSpec, ParsesFastDramAndEmulatedSlow) {
  auto configs = parse_tier_spec("fast=dram:8GiB,slow=emulated:optane:64GiB");
  ASSERT_TRUE(configs) << configs.status().to_string();
  ASSERT_EQ(configs->size(), 2u);
  EXPECT_EQ((*configs)[0].name, "fast");
  EXPECT_EQ((*configs)[0].kind, TierKind::kDram);
  EXPECT_EQ((*configs)[0].budget_bytes, 8ULL << 30);
  EXPECT_EQ((*configs)[1].name, "slow");
  EXPECT_EQ((*configs)[1].kind, TierKind::kEmulated);
  EXPECT_EQ((*configs)[1].preset, "optane");
  EXPECT_EQ((*configs)[1].budget_bytes, 64ULL << 30);
}

TEST(TierSpec, ParsesEveryKindAndOptionalSizes) {
  auto configs = parse_tier_spec("a=numa:1, b=daxkmem:2G ,c=pmem:/mnt/pmem0:512MiB,d=dram");
  ASSERT_TRUE(configs) << configs.status().to_string();
  ASSERT_EQ(configs->size(), 4u);
  EXPECT_EQ((*configs)[0].kind, TierKind::kNuma);
  EXPECT_EQ((*configs)[0].numa_node, 1);
  EXPECT_EQ((*configs)[0].budget_bytes, 0u);  // machine capacity
  EXPECT_EQ((*configs)[1].kind, TierKind::kDaxKmem);
  EXPECT_EQ((*configs)[1].budget_bytes, 2ULL << 30);
  EXPECT_EQ((*configs)[2].pmem_dir, "/mnt/pmem0");
  EXPECT_EQ((*configs)[2].budget_bytes, 512ULL << 20);
  EXPECT_EQ((*configs)[3].kind, TierKind::kDram);
}

TEST(TierSpec, GpuTiersParseAndAreNotHostTiers) {
  auto configs = parse_tier_spec("fast=cuda:1:16GiB,slow=pinned:64GiB");
  ASSERT_TRUE(configs) << configs.status().to_string();
  EXPECT_EQ((*configs)[0].kind, TierKind::kCuda);
  EXPECT_EQ((*configs)[0].cuda_device, 1);
  EXPECT_EQ((*configs)[0].budget_bytes, 16ULL << 30);
  EXPECT_EQ((*configs)[1].kind, TierKind::kPinned);
  EXPECT_TRUE(is_gpu_kind((*configs)[1].kind));
  EXPECT_EQ(format_tier_spec(configs.value()), "fast=cuda:1:16GiB,slow=pinned:64GiB");
  EXPECT_FALSE(parse_tier_spec("fast=cuda:gpu0"));
  EXPECT_FALSE(parse_tier_spec("fast=cuda"));
  EXPECT_FALSE(parse_tier_spec("slow=pinned:1GiB:2GiB"));
  // The host runtime opens host tiers only: a GPU tier is the GPU backend's, said so.
  const Status s = open_tier((*configs)[0]).status();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("the GPU backend (gpu/) opens it"), std::string::npos) << s.message();
}

// Every kind (each with its argument, with a size and without) parses and formats back the same.
TEST(TierSpec, RoundTripsThroughFormat) {
  const std::string spec =
      "fast=numa:0:1GiB,slow=emulated:cxl:3GiB,p=pmem:/tmp/x,d=dram,k=daxkmem:2GiB,g=cuda:1:16GiB,h=pinned,"
      "n=numa:3";
  auto configs = parse_tier_spec(spec);
  ASSERT_TRUE(configs) << configs.status().to_string();
  EXPECT_EQ(format_tier_spec(configs.value()), spec);
  auto again = parse_tier_spec(format_tier_spec(configs.value()));
  ASSERT_TRUE(again) << again.status().to_string();
  EXPECT_EQ(format_tier_spec(again.value()), format_tier_spec(configs.value()));
  EXPECT_EQ((*again)[1].budget_bytes, 3ULL << 30);
}

// Each bad spec fails with kInvalidArgument and a message containing the quoted bad part.
struct BadSpec {
  const char* spec;
  const char* message_part;
};

class TierSpecRejects : public ::testing::TestWithParam<BadSpec> {};

TEST_P(TierSpecRejects, WithMessageQuotingTheProblem) {
  auto configs = parse_tier_spec(GetParam().spec);
  ASSERT_FALSE(configs) << "accepted: " << GetParam().spec;
  EXPECT_EQ(configs.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(configs.status().message().find(GetParam().message_part), std::string::npos)
      << configs.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    BadInput, TierSpecRejects,
    ::testing::Values(
        BadSpec{"", "empty tier spec"},
        BadSpec{"fast=dram:8GiB,slow=flash:1GiB", "unknown tier kind 'flash'"},
        BadSpec{"fast=dram:8GiB,slow=flash:1GiB", "\"slow=flash:1GiB\""},
        BadSpec{"fast=dram:-5GiB", "negative size '-5GiB'"},
        BadSpec{"fast=dram:lots", "unparsable size 'lots'"},
        BadSpec{"fast=dram:8XB", "unparsable size '8XB'"}, BadSpec{"fast=dram:0", "budget of 0 bytes"},
        BadSpec{"fast=dram:99999999999TiB", "does not fit in 64 bits"},
        BadSpec{"fast=dram:99999999999999999999", "size '99999999999999999999' is too large"},
        BadSpec{"fast=dram:99999999999999999999GiB", "is too large"}, BadSpec{"fast", "expected NAME=KIND"},
        BadSpec{"=dram", "no name"}, BadSpec{"a=dram,a=dram", "used twice"},
        BadSpec{"a=numa:x", "'x' is not a NUMA node number"}, BadSpec{"a=numa", "numa:NODE[:SIZE]"},
        BadSpec{"a=emulated", "emulated:PRESET[:SIZE]"}, BadSpec{"a=dram:1G:2G", "dram[:SIZE]"},
        BadSpec{"a=pmem::1G", "pmem needs a directory"}, BadSpec{"a=dram:100B", "less than one 4 KiB page"},
        BadSpec{"a=dram:4095", "less than one 4 KiB page"}));

TEST(SizeParse, UnitsArePowersOf1024) {
  EXPECT_EQ(parse_size_bytes("4096").value(), 4096u);
  EXPECT_EQ(parse_size_bytes("4096B").value(), 4096u);
  EXPECT_EQ(parse_size_bytes("3KiB").value(), 3072u);
  EXPECT_EQ(parse_size_bytes("3K").value(), 3072u);
  EXPECT_EQ(parse_size_bytes("2MiB").value(), 2u << 20);
  EXPECT_EQ(parse_size_bytes("1TiB").value(), 1ULL << 40);
}

// The one table per enum: names both ways, an unlisted value or name, the list for messages.
TEST(EnumNames, NamesBothWaysAndSaysWhatItDoesNotKnow) {
  enum class Color { kRed, kBlue, kGreen };
  constexpr EnumName<Color> kNames[] = {{Color::kRed, "red"}, {Color::kBlue, "light blue"}};
  EXPECT_EQ(name_of(Color::kBlue, kNames), "light blue");
  EXPECT_EQ(name_of(Color::kGreen, kNames), "unknown");
  EXPECT_EQ(name_of(Color::kGreen, kNames, "?"), "?");
  EXPECT_EQ(value_named("red", kNames), Color::kRed);
  EXPECT_FALSE(value_named("green", kNames).has_value());
  EXPECT_EQ(names_of(kNames), "red, light blue");
  // Every tier kind's name parses back to that kind.
  for (TierKind kind : {TierKind::kDram, TierKind::kNuma, TierKind::kDaxKmem, TierKind::kPmem,
                        TierKind::kEmulated, TierKind::kCuda, TierKind::kPinned}) {
    EXPECT_STRNE(to_string(kind), "unknown");
    const std::string arg = kind == TierKind::kNuma || kind == TierKind::kCuda ? ":0"
                            : kind == TierKind::kPmem                          ? ":/tmp"
                            : kind == TierKind::kEmulated                      ? ":optane"
                                                                               : "";
    auto parsed = parse_tier_spec(std::string("t=") + to_string(kind) + arg);
    ASSERT_TRUE(parsed.is_ok()) << parsed.status().message();
    EXPECT_EQ(parsed->front().kind, kind);
  }
}

}  // namespace
}  // namespace tensortier
