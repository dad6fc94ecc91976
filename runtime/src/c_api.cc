// The C API (tensortier.h) over the C++ Runtime.
#include "tensortier/tensortier.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "tensortier/runtime.h"

struct tt_runtime {
  std::unique_ptr<tensortier::Runtime> runtime;
};

namespace {

// The thread's last error, in a buffer with no destructor: a std::string here would be destroyed
// when exit() ends the main thread's thread-locals, before the atexit handlers that may still call
// the API run (and read or write it). Longer messages are cut, marked with "...".
constexpr std::size_t kErrorBytes = 2048;
thread_local char last_error[kErrorBytes];

tt_status report(const tensortier::Status& status) {
  const std::string& message = status.is_ok() ? std::string() : status.message();
  const std::size_t n = std::min(message.size(), kErrorBytes - 1);
  std::memcpy(last_error, message.data(), n);
  last_error[n] = '\0';
  if (n < message.size()) std::memcpy(last_error + kErrorBytes - 4, "...", 4);
  return static_cast<tt_status>(status.code());
}

tt_status null_argument(const char* call) {
  return report(tensortier::invalid_argument(std::string(call) + ": a required pointer argument is NULL"));
}

// No C++ exception may cross into C (undefined behaviour: usually std::terminate). The runtime
// reports errors as Status; what can still throw (std::bad_alloc from a container, a length_error
// from a table past its limit) becomes a status here.
template <typename Body>
tt_status guarded(const char* call, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return report(tensortier::out_of_memory(std::string(call) + ": out of memory (std::bad_alloc)"));
  } catch (const std::exception& e) {
    return report(tensortier::internal_error(std::string(call) + ": " + e.what()));
  } catch (...) {
    return report(tensortier::internal_error(std::string(call) + ": an unknown C++ exception"));
  }
}

// tt_status is the C face of StatusCode: the same values, kept in step here.
static_assert(static_cast<int>(tensortier::StatusCode::kOk) == TT_OK);
static_assert(static_cast<int>(tensortier::StatusCode::kInvalidArgument) == TT_INVALID_ARGUMENT);
static_assert(static_cast<int>(tensortier::StatusCode::kOutOfMemory) == TT_OUT_OF_MEMORY);
static_assert(static_cast<int>(tensortier::StatusCode::kNotFound) == TT_NOT_FOUND);
static_assert(static_cast<int>(tensortier::StatusCode::kUnavailable) == TT_UNAVAILABLE);
static_assert(static_cast<int>(tensortier::StatusCode::kFailedPrecondition) == TT_FAILED_PRECONDITION);
static_assert(static_cast<int>(tensortier::StatusCode::kInternal) == TT_INTERNAL);

}  // namespace

extern "C" {

tt_status tt_runtime_create(const char* spec, tt_runtime** out) {
  return guarded("tt_runtime_create", [&]() -> tt_status {
    if (out == nullptr) return null_argument("tt_runtime_create");
    *out = nullptr;
    tensortier::RuntimeOptions options;
    if (spec != nullptr) options.tier_spec = spec;
    options.ready_memory = false;  // C callers hold raw pointers: objects keep their address
    auto runtime = tensortier::Runtime::create(options);
    if (!runtime) return report(runtime.status());
    *out = new tt_runtime{std::move(runtime).value()};
    return report(tensortier::Status::ok());
  });
}

void tt_runtime_destroy(tt_runtime* runtime) {
  delete runtime;
}

tt_status tt_alloc(tt_runtime* runtime, const char* name, size_t bytes, uint32_t group, void** out) {
  return guarded("tt_alloc", [&]() -> tt_status {
    if (runtime == nullptr || out == nullptr) return null_argument("tt_alloc");
    *out = nullptr;
    auto info = runtime->runtime->allocate(name != nullptr ? name : "", bytes, group);
    if (!info) return report(info.status());
    *out = info->address;
    return report(tensortier::Status::ok());
  });
}

tt_status tt_free(tt_runtime* runtime, void* address) {
  return guarded("tt_free", [&]() -> tt_status {
    if (runtime == nullptr) return null_argument("tt_free");
    return report(runtime->runtime->free(address));
  });
}

tt_status tt_move(tt_runtime* runtime, const void* address, uint32_t tier, void** out) {
  return guarded("tt_move", [&]() -> tt_status {
    if (runtime == nullptr) return null_argument("tt_move");
    auto moved = runtime->runtime->move(address, tier);
    if (!moved) return report(moved.status());
    if (out != nullptr) *out = moved->address;
    return report(tensortier::Status::ok());
  });
}

tt_status tt_object_tier(const tt_runtime* runtime, const void* address, uint32_t* out) {
  return guarded("tt_object_tier", [&]() -> tt_status {
    if (runtime == nullptr || out == nullptr) return null_argument("tt_object_tier");
    auto info = runtime->runtime->object(address);
    if (!info) return report(info.status());
    *out = info->tier;
    return report(tensortier::Status::ok());
  });
}

tt_status tt_step_begin(tt_runtime* runtime) {
  return guarded("tt_step_begin", [&]() -> tt_status {
    if (runtime == nullptr) return null_argument("tt_step_begin");
    return report(runtime->runtime->step_begin());
  });
}

tt_status tt_step_end(tt_runtime* runtime) {
  return guarded("tt_step_end", [&]() -> tt_status {
    if (runtime == nullptr) return null_argument("tt_step_end");
    return report(runtime->runtime->step_end());
  });
}

tt_status tt_layer_begin(tt_runtime* runtime, const char* name, const void* const* reads, size_t read_count,
                         const void* const* writes, size_t write_count) {
  return guarded("tt_layer_begin", [&]() -> tt_status {
    if (runtime == nullptr || (reads == nullptr && read_count != 0) ||
        (writes == nullptr && write_count != 0)) {
      return null_argument("tt_layer_begin");
    }
    return report(runtime->runtime->layer_begin(name != nullptr ? name : "", {reads, read_count},
                                                {writes, write_count}));
  });
}

tt_status tt_layer_end(tt_runtime* runtime) {
  return guarded("tt_layer_end", [&]() -> tt_status {
    if (runtime == nullptr) return null_argument("tt_layer_end");
    return report(runtime->runtime->layer_end());
  });
}

tt_status tt_object_id(const tt_runtime* runtime, const void* address, uint64_t* out) {
  return guarded("tt_object_id", [&]() -> tt_status {
    if (runtime == nullptr || out == nullptr) return null_argument("tt_object_id");
    auto info = runtime->runtime->object(address);
    if (!info) return report(info.status());
    *out = info->id;
    return report(tensortier::Status::ok());
  });
}

tt_status tt_address_of(const tt_runtime* runtime, uint64_t id, void** out) {
  return guarded("tt_address_of", [&]() -> tt_status {
    if (runtime == nullptr || out == nullptr) return null_argument("tt_address_of");
    auto address = runtime->runtime->address_of(id);
    if (!address) return report(address.status());
    *out = address.value();
    return report(tensortier::Status::ok());
  });
}

tt_status tt_layer_begin_ids(tt_runtime* runtime, const char* name, const uint64_t* reads, size_t read_count,
                             const uint64_t* writes, size_t write_count, void** addresses) {
  return guarded("tt_layer_begin_ids", [&]() -> tt_status {
    if (runtime == nullptr || (reads == nullptr && read_count != 0) ||
        (writes == nullptr && write_count != 0))
      return null_argument("tt_layer_begin_ids");
    std::vector<void*> found(read_count + write_count);
    tensortier::Status s = runtime->runtime->layer_begin(name != nullptr ? name : "", {reads, read_count},
                                                         {writes, write_count}, found);
    if (s.is_ok() && addresses != nullptr) std::copy(found.begin(), found.end(), addresses);
    return report(s);
  });
}

tt_status tt_pin(tt_runtime* runtime, const uint64_t* ids, size_t count, void** addresses) {
  return guarded("tt_pin", [&]() -> tt_status {
    if (runtime == nullptr || (ids == nullptr && count != 0)) return null_argument("tt_pin");
    std::vector<void*> found(count);
    tensortier::Status s = runtime->runtime->pin_objects({ids, count}, found);
    if (s.is_ok() && addresses != nullptr) std::copy(found.begin(), found.end(), addresses);
    return report(s);
  });
}

tt_status tt_unpin(tt_runtime* runtime, const uint64_t* ids, size_t count) {
  return guarded("tt_unpin", [&]() -> tt_status {
    if (runtime == nullptr || (ids == nullptr && count != 0)) return null_argument("tt_unpin");
    runtime->runtime->unpin_objects({ids, count});
    return report(tensortier::Status::ok());
  });
}

tt_status tt_prepare_thread(void) {
  return guarded("tt_prepare_thread",
                 [&]() -> tt_status { return report(tensortier::Runtime::prepare_thread()); });
}

uintptr_t tt_device_stream(const tt_runtime* runtime) {
  return runtime == nullptr ? 0 : runtime->runtime->device_stream();
}

size_t tt_tier_count(const tt_runtime* runtime) {
  return runtime == nullptr ? 0 : runtime->runtime->tier_count();
}

tt_status tt_tier_stats_get(const tt_runtime* runtime, size_t tier, tt_tier_stats* out) {
  return guarded("tt_tier_stats_get", [&]() -> tt_status {
    if (runtime == nullptr || out == nullptr) return null_argument("tt_tier_stats_get");
    const auto stats = runtime->runtime->stats();
    if (tier >= stats.tiers.size()) {
      return report(tensortier::invalid_argument("tt_tier_stats_get: tier " + std::to_string(tier) +
                                                 " does not exist (" + std::to_string(stats.tiers.size()) +
                                                 " tiers)"));
    }
    const tensortier::TierUsage& u = stats.tiers[tier];
    *out = tt_tier_stats{};
    std::strncpy(out->name, u.name.c_str(), sizeof out->name - 1);
    out->budget_bytes = u.budget_bytes;
    out->mapped_bytes = u.mapped_bytes;
    out->peak_mapped_bytes = u.peak_mapped_bytes;
    out->live_bytes = u.live_bytes;
    out->live_objects = u.live_objects;
    out->cached_bytes = u.cached_bytes;
    out->fallbacks_out = u.fallbacks_out;
    out->fallbacks_in = u.fallbacks_in;
    return report(tensortier::Status::ok());
  });
}

tt_status tt_profile_json(const tt_runtime* runtime, char* buffer, size_t capacity, size_t* needed) {
  return guarded("tt_profile_json", [&]() -> tt_status {
    if (runtime == nullptr || (buffer == nullptr && capacity > 0)) return null_argument("tt_profile_json");
    const auto profile = runtime->runtime->profile();
    if (profile == nullptr) {
      return report(tensortier::not_found(
          "tt_profile_json: no step has been profiled yet (the second step is, by default)"));
    }
    const std::string json = tensortier::profiler::to_json(*profile);
    if (needed != nullptr) *needed = json.size() + 1;
    if (capacity < json.size() + 1) {
      return report(tensortier::out_of_memory("tt_profile_json: the profile takes " +
                                              std::to_string(json.size() + 1) + " bytes; the buffer has " +
                                              std::to_string(capacity)));
    }
    std::memcpy(buffer, json.c_str(), json.size() + 1);
    return report(tensortier::Status::ok());
  });
}

const char* tt_last_error(void) {
  return last_error;
}

}  // extern "C"
