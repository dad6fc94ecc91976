// StepProfiler: one step's lifetimes, accesses and counters (see step_profiler.h).
#include "tensortier/profiler/step_profiler.h"

#include "tensortier/profiler/alt_stacks.h"

#include <algorithm>
#include <chrono>
#include <system_error>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace tensortier::profiler {
namespace {

SpanAccessProfile to_profile(const FaultTracker::SpanAccess& a) {
  SpanAccessProfile p;
  p.id = a.span.id;
  p.is_group = a.span.is_group;
  p.page_bytes = a.unit_bytes;
  p.pages_read = a.units_read;
  p.pages_written = a.units_written;
  p.faults = a.faults;
  p.touches = a.touches;
  p.coarse = a.coarse;
  return p;
}

}  // namespace

Result<AccessSource> parse_access_source(std::string_view name) {
  if (name == "protection") return AccessSource::kPageProtection;
  if (name == "declared") return AccessSource::kDeclared;
  return invalid_argument(fmt::format(
      "profile accesses '{}': use 'protection' (pages the step touched) or 'declared' (what its layers "
      "declared)",
      name));
}

std::string_view to_string(AccessSource source) {
  return source == AccessSource::kDeclared ? "declared" : "protection";
}

Status validate(const ProfileOptions& options) {
  if (options.granularity_bytes != kSmallPageBytes && options.granularity_bytes != kHugePageBytes) {
    return invalid_argument(
        fmt::format("profile granularity of {} bytes: use 4KiB or 2MiB", options.granularity_bytes));
  }
  if (options.sample_fraction < 0 || options.sample_fraction > 1) {
    return invalid_argument(
        fmt::format("profile sample fraction {} is not in [0, 1]", options.sample_fraction));
  }
  return Status::ok();
}

Result<std::unique_ptr<StepProfiler>> StepProfiler::start(
    const ProfileOptions& options, FaultTracker::Lookup lookup, const void* context, std::uint64_t step,
    const std::vector<std::pair<ObjectInfo, SpanView>>& live, Counters* counters) {
  TENSORTIER_RETURN_IF_ERROR(validate(options));
  std::unique_ptr<FaultTracker> installed;
  std::string declared_why, handout_note;
  if (options.accesses == AccessSource::kPageProtection) {
    // Threads that ran user code throughout the hand-out (perhaps inside oneDNN kernels) were not
    // signalled and have no alternate stack: a fault of theirs could corrupt their stack, so this
    // step is profiled from the layers' declarations instead.
    Result<AltStackHandout> handout = give_threads_alt_stacks();
    if (!handout) return handout.status();
    handout_note = handout->describe();
    if (handout->running > 0) {
      declared_why = fmt::format(
          "accesses as the layers declared them: {} of the process's {} threads ran user code throughout the "
          "alternate signal stacks' hand-out (inside oneDNN kernels, perhaps), where no signal may land; no "
          "page "
          "was protected (start such threads through tt_prepare_thread or under tensortier-run)",
          handout->running, handout->threads);
      spdlog::warn("step {}: {}", step, declared_why);
    } else {
      FaultTracker::Options tracker_options;
      tracker_options.unit_bytes = options.granularity_bytes;
      tracker_options.async_writes = options.async_writes;
      tracker_options.alt_stacks_given = true;
      tracker_options.threads_without_alt_stack = handout->unanswered;
      auto tracker = FaultTracker::install(lookup, context, tracker_options);
      if (!tracker) return tracker.status();
      installed = std::move(tracker).value();
    }
  }
  std::unique_ptr<StepProfiler> p(new StepProfiler(options, std::move(installed), counters));
  p->declared_why_ = std::move(declared_why);
  if (!handout_note.empty()) p->profile_.notes.push_back(std::move(handout_note));
  if (!p->declared_why_.empty()) {
    p->profile_.access_source = to_string(AccessSource::kDeclared);
    p->profile_.write_tracking = "declared by the layers";
  }
  p->profile_.step = step;
  for (const auto& [object, span] : live) p->on_allocate(object, span);
  for (auto& [id, o] : p->objects_) o.born_at_layer.reset();  // alive before the step began
  if (p->tracker_ == nullptr) return p;  // declared: nothing to protect, nothing to sample
  // Protect now: the host code before the first layer is profiled too.
  std::vector<SpanView> pending;
  pending.swap(p->pending_);
  for (const SpanView& s : pending) {
    if (Status st = p->tracker_->watch(s); !st.is_ok()) p->watch_errors_.push_back(st.message());
  }
  if (p->options_.sample_interval_us > 0) {
    try {
      p->sampler_ = std::thread([raw = p.get()] { raw->sampler_loop(); });
    } catch (const std::system_error& e) {  // its destructor unprotects what was protected
      return unavailable(fmt::format("the profile's sampler thread could not be started: {}", e.what()));
    }
  }
  return p;
}

StepProfiler::StepProfiler(const ProfileOptions& options, std::unique_ptr<FaultTracker> tracker,
                           Counters* counters)
    : options_(options), tracker_(std::move(tracker)), counters_(options.counters ? counters : nullptr) {
  const bool protecting = tracker_ != nullptr;  // declared accesses are counted in small pages, unsampled
  profile_.granularity_bytes = protecting ? options.granularity_bytes : kSmallPageBytes;
  profile_.sample_interval_us = protecting ? options.sample_interval_us : 0;
  profile_.sample_fraction = protecting && options.sample_interval_us > 0 ? options.sample_fraction : 0.0;
  if (counters_ != nullptr) profile_.counter_source = counters_->source();
  profile_.write_tracking = tracker_ != nullptr ? tracker_->write_tracking() : "declared by the layers";
  profile_.access_source = to_string(options.accesses);
}

StepProfiler::~StepProfiler() {
  stop_sampler();
  if (tracker_ != nullptr) tracker_->unwatch_all();
}

void StepProfiler::stop_sampler() {
  {
    std::lock_guard lock(sampler_mutex_);
    stop_ = true;
    in_layer_ = false;
  }
  sampler_wake_.notify_all();
  if (sampler_.joinable()) sampler_.join();
}

void StepProfiler::sampler_loop() {
  std::unique_lock lock(sampler_mutex_);
  const auto period = std::chrono::microseconds(options_.sample_interval_us);
  while (!stop_) {
    sampler_wake_.wait_for(lock, period);
    if (stop_) break;
    // Sampling holds sampler_mutex_, so a layer cannot end (and be collected) mid-sample.
    if (in_layer_) tracker_->sample(options_.sample_fraction, options_.sample_max_units);
  }
}

void StepProfiler::on_allocate(const ObjectInfo& object, const SpanView& span) {
  std::lock_guard lock(mutex_);
  ObjectProfile o;
  o.id = object.id;
  o.key = object.key;
  o.name = object.name;
  o.bytes = object.bytes;
  o.reserved_bytes = object.reserved_bytes;
  o.group = object.group;
  o.tier = object.tier;
  o.small = object.small;
  if (step_begun_) {                                             // else alive before the step
    const bool output = layer_open_ && is_step_key(object.key);  // the running layer's, by its thread
    o.born_at_layer = output ? layers_begun_ - 1 : layers_begun_;
    if (output) born_in_layer_.push_back(object.id);
  }
  objects_.insert_or_assign(object.id, std::move(o));
  if (tracker_ != nullptr) pending_.push_back(span);
  live_bytes_ += object.bytes;
  if (live_bytes_ > profile_.peak_live_bytes) {
    profile_.peak_live_bytes = live_bytes_;
    profile_.peak_at_layer = layers_begun_;
  }
}

void StepProfiler::on_free(ObjectId id, const SpanView& span) {
  std::lock_guard lock(mutex_);
  auto it = objects_.find(id);
  if (it == objects_.end()) return;
  live_bytes_ -= it->second.bytes;
  if (step_begun_) {
    it->second.freed_at_layer = layers_begun_;
  } else {
    objects_.erase(it);  // gone before the step began: not part of it
  }
  if (!span.is_group && tracker_ != nullptr) {
    std::erase_if(pending_, [&](const SpanView& s) { return s.base == span.base; });
    tracker_->unwatch(span.base);
  }
}

void StepProfiler::on_step_begin(std::uint64_t /*step*/) {
  std::lock_guard lock(mutex_);
  step_begun_ = true;
  // The peak is the step's: what was alive when it began, and from there on.
  profile_.peak_live_bytes = live_bytes_;
  profile_.peak_at_layer = 0;
}

void StepProfiler::on_host_pin(std::span<const ObjectId> ids) {
  std::lock_guard lock(mutex_);
  for (ObjectId id : ids) {
    if (auto it = objects_.find(id); it != objects_.end()) it->second.host_pinned = true;
  }
}

void StepProfiler::on_release(const SpanView& span) {
  if (tracker_ == nullptr) return;
  std::lock_guard lock(mutex_);
  std::erase_if(pending_, [&](const SpanView& s) { return s.base == span.base; });
  tracker_->unwatch(span.base);
}

std::vector<SpanAccessProfile> StepProfiler::collect() {
  std::vector<SpanAccessProfile> out;
  if (tracker_ == nullptr) return out;
  for (const FaultTracker::SpanAccess& a : tracker_->collect()) out.push_back(to_profile(a));
  return out;
}

void StepProfiler::on_layer_begin(const LayerEvent& event) {
  LayerProfile layer;
  layer.name = std::string(event.name);
  layer.declared_reads.assign(event.reads.begin(), event.reads.end());
  layer.declared_writes.assign(event.writes.begin(), event.writes.end());
  layer.allocator_live_bytes = event.live_bytes;
  layer.unprofiled_duration_ns = event.previous_duration_ns;
  layer.accesses_before = collect();
  {
    // The spans born since the last boundary are protected under mutex_, which on_free takes
    // too: a span another thread frees is either gone from pending_ before this or unwatched
    // after it, never protected after its free (its range would be reused still PROT_NONE, and
    // the fault on it is nobody's: a SIGSEGV).
    std::lock_guard lock(mutex_);
    layer.index = layers_begun_++;
    layer_open_ = true;
    for (const SpanView& s : pending_) {  // empty without a tracker
      if (Status st = tracker_->watch(s); !st.is_ok()) watch_errors_.push_back(st.message());
    }
    pending_.clear();
  }
  profile_.layers.push_back(std::move(layer));
  if (counters_ != nullptr) counters_at_begin_ = counters_->read();
  std::lock_guard lock(sampler_mutex_);
  in_layer_ = true;
}

void StepProfiler::on_layer_end(const LayerEndEvent& event) {
  {
    std::lock_guard lock(sampler_mutex_);
    in_layer_ = false;
  }
  if (profile_.layers.empty()) return;
  LayerProfile& layer = profile_.layers.back();
  {
    std::lock_guard lock(mutex_);
    layer_open_ = false;
    for (ObjectId id : born_in_layer_) {
      if (std::ranges::find(layer.declared_writes, id) == layer.declared_writes.end())
        layer.declared_writes.push_back(id);
    }
    born_in_layer_.clear();
  }
  if (counters_ != nullptr) {
    const std::vector<double> now = counters_->read();
    for (std::size_t i = 0; i < now.size() && i < counters_at_begin_.size(); ++i) {
      layer.counters.push_back(
          Counter{counters_->names()[i], counters_->source(), now[i] - counters_at_begin_[i]});
    }
  }
  layer.accesses = tracker_ != nullptr ? collect() : declared_accesses(layer);
  layer.duration_ns = event.duration_ns;
  layer.emulated_charge_ns = event.emulated_charge_ns;
}

void StepProfiler::set_layer_durations(std::span<const std::uint64_t> durations_ns) {
  if (durations_ns.size() != profile_.layers.size()) return;
  for (std::size_t i = 0; i < durations_ns.size(); ++i) profile_.layers[i].duration_ns = durations_ns[i];
}

// Each declared object's every page, read where declared read, written where declared written
// (written only: no page read first, which plans take as an overwrite), in kSmallPageBytes units.
std::vector<SpanAccessProfile> StepProfiler::declared_accesses(const LayerProfile& layer) {
  std::vector<SpanAccessProfile> out;
  std::lock_guard lock(mutex_);
  auto add = [&](ObjectId id, bool read, bool written) {
    auto it = objects_.find(id);
    if (it == objects_.end()) return;
    const std::uint64_t pages = (it->second.bytes + kSmallPageBytes - 1) / kSmallPageBytes;
    SpanAccessProfile a;
    a.id = id;
    a.page_bytes = kSmallPageBytes;
    a.pages_read = read ? pages : 0;
    a.pages_written = written ? pages : 0;
    a.touches = static_cast<double>(pages);
    out.push_back(a);
  };
  auto declared = [](const std::vector<ObjectId>& ids, ObjectId id) {
    return std::find(ids.begin(), ids.end(), id) != ids.end();
  };
  for (ObjectId id : layer.declared_reads) add(id, true, declared(layer.declared_writes, id));
  for (ObjectId id : layer.declared_writes) {
    if (!declared(layer.declared_reads, id)) add(id, false, true);
  }
  return out;
}

StepProfile StepProfiler::finish(std::uint64_t signature, std::uint64_t duration_ns,
                                 std::uint64_t allocator_peak_live_bytes) {
  stop_sampler();
  profile_.accesses_after = collect();
  if (tracker_ != nullptr) {
    profile_.faults = tracker_->faults();
    tracker_->unwatch_all();
  } else {
    profile_.notes.emplace_back(
        !declared_why_.empty()
            ? declared_why_
            : "accesses as the layers declared them (ProfileOptions::accesses = declared): no "
              "page was protected, and host code's accesses are seen only where it pinned the "
              "objects");
  }

  std::lock_guard lock(mutex_);
  profile_.signature = signature;
  profile_.duration_ns = duration_ns;
  profile_.allocator_peak_live_bytes = allocator_peak_live_bytes;
  const auto layer_count = static_cast<std::uint32_t>(profile_.layers.size());
  for (auto& [id, o] : objects_) {
    o.lifetime = classify(o.born_at_layer, o.freed_at_layer, layer_count);
    const std::uint32_t from = o.born_at_layer.value_or(0);
    const std::uint32_t to = std::min(o.freed_at_layer.value_or(layer_count), layer_count);
    for (std::uint32_t i = from; i < to; ++i) profile_.layers[i].live_bytes += o.bytes;
    profile_.objects.push_back(o);
  }
  std::sort(profile_.objects.begin(), profile_.objects.end(),
            [](const ObjectProfile& a, const ObjectProfile& b) { return a.id < b.id; });
  if (counters_ != nullptr) {
    for (const std::string& note : counters_->notes()) profile_.notes.push_back(note);
  } else {
    profile_.notes.emplace_back("counters off (ProfileOptions::counters)");
  }
  if (options_.sample_interval_us == 0 && tracker_ != nullptr)
    profile_.notes.emplace_back("re-protection sampling off: touches = pages touched");
  for (const std::string& e : watch_errors_) profile_.notes.push_back("not watched: " + e);
  if (tracker_ != nullptr &&
      (tracker_->threads_without_alt_stack() > 0 || tracker_->faults_off_alt_stack() > 0)) {
    profile_.notes.push_back(
        fmt::format("{} threads had no alternate signal stack and {} faults were handled on a thread's own "
                    "stack (threads that "
                    "block real-time signals, or started after the profile began); oneDNN's JIT kernels may "
                    "not survive that",
                    tracker_->threads_without_alt_stack(), tracker_->faults_off_alt_stack()));
  }
  std::uint64_t coarse = 0;
  for (const LayerProfile& l : profile_.layers) {
    for (const SpanAccessProfile& a : l.accesses) coarse += a.coarse ? 1 : 0;
  }
  if (coarse > 0) {
    profile_.notes.push_back(
        fmt::format("{} layer accesses are coarse: mprotect could not split a mapping (vm.max_map_count), so "
                    "the whole span "
                    "was granted and its page counts are low",
                    coarse));
  }
  return std::move(profile_);
}

}  // namespace tensortier::profiler
