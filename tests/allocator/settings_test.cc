// The one parser of TENSORTIER_* settings (settings.h), and the variables that go through it as
// the runtime and the allocator read them: a bad value refused naming the variable, never read as
// something else.
#include "tensortier/settings.h"

#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tensortier/runtime.h"
#include "test_util.h"

namespace tensortier {
namespace {

using testing::ScopedEnv;

TEST(Settings, SwitchesAreZeroOneOffOnInAnyCaseAndNothingElse) {
  for (const char* on : {"1", "on", "ON", "On"})
    EXPECT_EQ(settings::parse_switch("X", on).value(), true) << on;
  for (const char* off : {"0", "off", "OFF", "oFf"})
    EXPECT_EQ(settings::parse_switch("X", off).value(), false) << off;
  for (const char* bad : {"", "2", "false", "no", "yes", "true", " on", "off2", "-1"}) {
    const auto r = settings::parse_switch("TENSORTIER_X", bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("TENSORTIER_X='" + std::string(bad) + "'"), std::string::npos);
    EXPECT_NE(r.status().message().find("0, 1, off or on"), std::string::npos) << r.status().message();
  }
}

TEST(Settings, NumbersAreWholeOrFiniteAndWithinTheirRange) {
  EXPECT_EQ(settings::parse_whole("N", "0", 0, 10).value(), 0u);
  EXPECT_EQ(settings::parse_whole("N", "10", 0, 10).value(), 10u);
  for (const char* bad : {"", "-1", "11", "abc", "1.5", " 3", "3 ", "18446744073709551616", "0x10"}) {
    const auto r = settings::parse_whole("TENSORTIER_N", bad, 0, 10);
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.status().message().find("from 0 to 10"), std::string::npos) << r.status().message();
  }
  EXPECT_DOUBLE_EQ(settings::parse_number("R", "12.5", 0.1, 100, "GB/s").value(), 12.5);
  for (const char* bad : {"", "1e-300", "nan", "inf", "-5", "1e9", "12GB", "0"}) {
    const auto r = settings::parse_number("TENSORTIER_R", bad, 0.1, 10000, "GB/s");
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.status().message().find("GB/s"), std::string::npos) << r.status().message();
  }
}

TEST(Settings, UnsetIsNoneAndSetIsRead) {
  unsetenv("TENSORTIER_TEST_SWITCH");
  EXPECT_FALSE(settings::env_switch("TENSORTIER_TEST_SWITCH").value().has_value());
  ScopedEnv on("TENSORTIER_TEST_SWITCH", "Off");
  EXPECT_EQ(settings::env_switch("TENSORTIER_TEST_SWITCH").value(), std::optional<bool>(false));
  ScopedEnv empty("TENSORTIER_TEST_WHOLE", "");
  EXPECT_FALSE(settings::env_whole("TENSORTIER_TEST_WHOLE", 0, 5)) << "set but empty is refused";
}

TEST(Settings, TheRuntimeRefusesABadReadyMemoryOrDramReferenceNamingIt) {
  // "off" once meant on (anything but "0" did): a C program keeping raw pointers had its layer
  // calls refused. Ready memory shows in the plan: places laid out, or none.
  for (const char* value : {"off", "OFF", "1", "on"}) {
    ScopedEnv env("TENSORTIER_READY_MEMORY", value);
    RuntimeOptions options("fast=dram:64MiB,slow=emulated:optane:256MiB");
    options.policy = "sentinel";
    options.fast_budget = "50%";
    options.trial_steps = 0;
    options.profile.sample_interval_us = 0;
    auto rt = Runtime::create(options);
    ASSERT_TRUE(rt) << rt.status().to_string();
    std::vector<ObjectId> ids;
    for (int i = 0; i < 4; ++i) ids.push_back((*rt)->allocate("w", 4 << 20).value().id);
    for (int step = 0; step < 4; ++step) {
      ASSERT_TRUE((*rt)->step_begin().is_ok());
      for (ObjectId id : ids) {
        std::vector<void*> at(1);
        ASSERT_TRUE((*rt)->layer_begin("l", std::vector<ObjectId>{id}, {}, at).is_ok());
        ASSERT_TRUE((*rt)->layer_end().is_ok());
      }
      ASSERT_TRUE((*rt)->step_end().is_ok());
    }
    ASSERT_NE((*rt)->plan(), nullptr) << value << ": " << (*rt)->policy_failure();
    const bool on = std::string(value) == "1" || std::string(value) == "on";
    EXPECT_EQ((*rt)->plan()->places.empty(), !on) << value;
  }
  for (const char* bad : {"false", "2", "no"}) {
    ScopedEnv env("TENSORTIER_READY_MEMORY", bad);
    auto rt = Runtime::create(RuntimeOptions("fast=dram:16MiB"));
    ASSERT_FALSE(rt) << bad;
    EXPECT_NE(rt.status().message().find("TENSORTIER_READY_MEMORY"), std::string::npos)
        << rt.status().message();
  }
  {
    // A reference no memory has made a move's emulated charge sleep for centuries.
    ScopedEnv tiny("TENSORTIER_DRAM_GBPS", "1e-300");
    auto rt = Runtime::create(RuntimeOptions("fast=dram:16MiB,slow=emulated:optane:64MiB"));
    ASSERT_FALSE(rt);
    EXPECT_NE(rt.status().message().find("TENSORTIER_DRAM_GBPS='1e-300'"), std::string::npos)
        << rt.status().message();
  }
  {
    ScopedEnv profile("TENSORTIER_PROFILE", "OFF");
    EXPECT_TRUE(Runtime::create(RuntimeOptions("fast=dram:16MiB")));
  }
  ScopedEnv profile("TENSORTIER_PROFILE", "-1");
  EXPECT_FALSE(Runtime::create(RuntimeOptions("fast=dram:16MiB")));
}

}  // namespace
}  // namespace tensortier
