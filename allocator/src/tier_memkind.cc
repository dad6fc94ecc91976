// Tiers over memkind kinds: a KMEM DAX node (MEMKIND_DAX_KMEM) and a file-backed kind on a
// directory (memkind_create_pmem: Optane App Direct on a DAX file system). Their ranges are
// RangeKind::kHeap: an object moving off one gets a new address.
#include <memkind.h>
#include <sys/statvfs.h>

#include <filesystem>

#include <fmt/format.h>

#include "os_pages.h"
#include "tier_backends.h"

namespace tensortier::detail {
namespace {

std::string memkind_message(int err) {
  char buffer[MEMKIND_ERROR_MESSAGE_SIZE] = {};
  memkind_error_message(err, buffer, sizeof buffer);
  return buffer;
}

class MemkindTier final : public Tier {
 public:
  MemkindTier(const TierConfig& config, std::uint64_t budget_bytes, memkind_t kind, std::string kind_name,
              bool owns_kind)
      : Tier(config.name, config.kind, budget_bytes),
        kind_(kind),
        kind_name_(std::move(kind_name)),
        owns_kind_(owns_kind) {}
  ~MemkindTier() override {
    if (owns_kind_) memkind_destroy_kind(kind_);
  }
  MemkindTier(const MemkindTier&) = delete;
  MemkindTier& operator=(const MemkindTier&) = delete;

 protected:
  Result<void*> map(std::size_t bytes, std::size_t alignment) override {
    if (kind() != TierKind::kPmem && bytes > physical_memory_bytes()) {
      return out_of_memory(fmt::format("{} is more than this machine's {} of memory", format_bytes(bytes),
                                       format_bytes(physical_memory_bytes())));
    }
    void* address = nullptr;
    const int err = memkind_posix_memalign(kind_, &address, alignment, bytes);
    if (err != 0 || address == nullptr) {
      return out_of_memory(fmt::format("{} could not allocate {} bytes ({})", kind_name_, bytes,
                                       err != 0 ? memkind_message(err) : "no memory"));
    }
    if (bytes >= kHugePageBytes) os::advise_huge_pages(address, bytes);
    if (Status s = os::populate(address, bytes); !s.is_ok()) {
      memkind_free(kind_, address);
      return s;
    }
    return address;
  }
  void unmap(void* address, std::size_t /*bytes*/) override { memkind_free(kind_, address); }
  RangeKind range_kind() const override { return RangeKind::kHeap; }
  std::string backend() const override { return "memkind " + kind_name_; }

 private:
  memkind_t kind_;
  std::string kind_name_;
  bool owns_kind_;  // true for a pmem kind this tier created and must destroy
};

}  // namespace

Result<std::unique_ptr<Tier>> open_memkind_tier(const TierConfig& config) {
  if (config.kind == TierKind::kDaxKmem) {
    if (const int err = memkind_check_available(MEMKIND_DAX_KMEM); err != 0) {
      return unavailable(
          fmt::format("tier '{}': MEMKIND_DAX_KMEM is not available: this machine has no KMEM DAX NUMA node "
                      "(memkind: {}). Bring one online with `daxctl reconfigure-device --mode=system-ram`, "
                      "use 'emulated:optane' instead, or for a test set MEMKIND_DAX_KMEM_NODES=<node>",
                      config.name, memkind_message(err)));
    }
    const std::uint64_t budget = budget_for(config, physical_memory_bytes(), "this machine's memory");
    return std::unique_ptr<Tier>(
        new MemkindTier(config, budget, MEMKIND_DAX_KMEM, "MEMKIND_DAX_KMEM", false));
  }
  // pmem: a file-backed kind in a directory.
  std::error_code ec;
  if (!std::filesystem::is_directory(config.pmem_dir, ec)) {
    return invalid_argument(fmt::format(
        "tier '{}': pmem directory '{}' does not exist or is not a directory; create it, or mount "
        "a DAX file system there (mount -o dax /dev/pmem0 {})",
        config.name, config.pmem_dir, config.pmem_dir));
  }
  std::uint64_t available_bytes = 0;  // unknown if statvfs fails: no default, no warning
  if (struct statvfs fs{}; statvfs(config.pmem_dir.c_str(), &fs) == 0)
    available_bytes = static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize;
  const std::uint64_t budget =
      budget_for(config, available_bytes, fmt::format("the space free on '{}'", config.pmem_dir));
  memkind_t kind = nullptr;
  // max_size 0: the kind's file may grow as far as the file system allows; the tier's budget is
  // what bounds it.
  if (const int err = memkind_create_pmem(config.pmem_dir.c_str(), 0, &kind); err != 0) {
    return unavailable(fmt::format("tier '{}': memkind_create_pmem on '{}' failed: {}", config.name,
                                   config.pmem_dir, memkind_message(err)));
  }
  return std::unique_ptr<Tier>(
      new MemkindTier(config, budget, kind, fmt::format("pmem kind on {}", config.pmem_dir), true));
}

}  // namespace tensortier::detail
