// Helpers shared by the tests: temporary directories, per-thread page-fault counts, and an
// ObjectAllocator over the tiers of a spec.
#pragma once

#include <sys/resource.h>
#include <sys/time.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tensortier/allocator/object_allocator.h"
#include "tensortier/allocator/tier_spec.h"

namespace tensortier::testing {

// Sets or clears an environment variable for one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tensortier-test-XXXXXX").string();
    path_ = mkdtemp(pattern.data()) != nullptr ? pattern : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Minor + major page faults taken by the calling thread so far.
inline long thread_page_faults() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_minflt + usage.ru_majflt;
}

// An allocator over the tiers `spec` names; null (with a test failure) when one cannot open.
inline std::unique_ptr<ObjectAllocator> allocator_for(const std::string& spec) {
  auto configs = parse_tier_spec(spec);
  EXPECT_TRUE(configs) << configs.status().to_string();
  if (!configs) return nullptr;
  std::vector<std::unique_ptr<Tier>> tiers;
  for (const TierConfig& c : configs.value()) {
    auto tier = open_tier(c);
    EXPECT_TRUE(tier) << tier.status().to_string();
    if (!tier) return nullptr;
    tiers.push_back(std::move(tier).value());
  }
  return std::make_unique<ObjectAllocator>(std::move(tiers));
}

}  // namespace tensortier::testing
