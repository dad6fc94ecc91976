#include "tensortier/migrator/executor.h"

#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <system_error>
#include <thread>

#include <fmt/format.h>
#include <tbb/concurrent_queue.h>

namespace tensortier::migrator {
namespace {

std::uint64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(ts.tv_nsec);
}

}  // namespace

void accumulate(ExecutorStats& total, const ExecutorStats& part) {
  total.steps += part.steps;
  total.moves += part.moves;
  total.segment_moves += part.segment_moves;
  total.discarded_moves += part.discarded_moves;
  total.bytes_in += part.bytes_in;
  total.bytes_out += part.bytes_out;
  total.copied_bytes += part.copied_bytes;
  total.failed_moves += part.failed_moves;
  total.late_moves += part.late_moves;
  total.late_dropped += part.late_dropped;
  total.stale_dropped += part.stale_dropped;
  total.missing += part.missing;
  total.off_plan_steps += part.off_plan_steps;
  total.off_plan_dropped += part.off_plan_dropped;
  total.mover_cpu_ns += part.mover_cpu_ns;
  total.mover_busy_ns += part.mover_busy_ns;
  if (!part.last_failure.empty()) total.last_failure = part.last_failure;
  if (part.steps != 0) {
    total.last_step_bytes_in = part.last_step_bytes_in;
    total.last_step_bytes_out = part.last_step_bytes_out;
    total.last_step_failed = part.last_step_failed;
    total.last_step_late = part.last_step_late;
  }
}

ExecutorStats since(const ExecutorStats& now, const ExecutorStats& before) {
  ExecutorStats d = now;
  d.steps -= before.steps;
  d.moves -= before.moves;
  d.segment_moves -= before.segment_moves;
  d.discarded_moves -= before.discarded_moves;
  d.bytes_in -= before.bytes_in;
  d.bytes_out -= before.bytes_out;
  d.copied_bytes -= before.copied_bytes;
  d.failed_moves -= before.failed_moves;
  d.late_moves -= before.late_moves;
  d.late_dropped -= before.late_dropped;
  d.stale_dropped -= before.stale_dropped;
  d.missing -= before.missing;
  d.off_plan_steps -= before.off_plan_steps;
  d.off_plan_dropped -= before.off_plan_dropped;
  d.mover_cpu_ns -= before.mover_cpu_ns;
  d.mover_busy_ns -= before.mover_busy_ns;
  return d;
}

struct Executor::Queue {
  tbb::concurrent_bounded_queue<Job> jobs;
};

Executor::Executor(Plan plan, std::uint32_t layers, MoveFn move, LayersBegunFn layers_begun,
                   PinSequenceFn pin_sequence)
    : plan_(std::move(plan)),
      layers_(layers),
      move_(std::move(move)),
      layers_begun_(std::move(layers_begun)),
      pin_sequence_(std::move(pin_sequence)),
      queue_(std::make_unique<Queue>()) {
  for (const PlannedMove& m : plan_.moves) by_layer_.emplace(m.after_layer, &m);
}

Executor::~Executor() {
  stop();
}

// Binds the mover thread to mover_cpu_ (where one is set); what went wrong for mover_cpu_problem().
void Executor::bind_mover() {
  if (mover_cpu_ < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (mover_cpu_ < CPU_SETSIZE) CPU_SET(static_cast<std::size_t>(mover_cpu_), &set);
  const int error =
      mover_cpu_ < CPU_SETSIZE ? pthread_setaffinity_np(mover_.native_handle(), sizeof set, &set) : EINVAL;
  std::lock_guard lock(mover_cpu_mutex_);
  mover_cpu_problem_ = error == 0 ? ""
                                  : fmt::format("the mover could not be bound to CPU {}: {}; it runs unbound",
                                                mover_cpu_, strerrordesc_np(error));
}

Status Executor::start() {
  if (state() != ExecutorState::kStopped) return Status::ok();
  state_.store(ExecutorState::kRunning, std::memory_order_release);
  try {
    mover_ = std::thread([this] { run(); });
  } catch (const std::system_error& e) {  // no thread to be had (a limit on threads or memory)
    state_.store(ExecutorState::kStopped, std::memory_order_release);
    return unavailable(fmt::format("its mover thread could not be started: {}", e.what()));
  }
  bind_mover();
  return Status::ok();
}

void Executor::stop() {
  if (state() == ExecutorState::kStopped) return;
  Job stop_job;
  stop_job.stop = true;
  queue_->jobs.push(stop_job);
  if (mover_.joinable()) mover_.join();
  state_.store(ExecutorState::kStopped, std::memory_order_release);
}

void Executor::set_paused(bool paused) {
  ExecutorState expected = paused ? ExecutorState::kRunning : ExecutorState::kPaused;
  state_.compare_exchange_strong(expected, paused ? ExecutorState::kPaused : ExecutorState::kRunning,
                                 std::memory_order_acq_rel);
}

ExecutorStats Executor::stats() const {
  std::lock_guard lock(stats_mutex_);
  return stats_;
}

std::uint64_t Executor::place_persistent(const std::vector<ObjectInfo>& objects) {
  std::uint64_t failed = 0;
  for (int pass = 0; pass < 2; ++pass) {  // outs of the fast tier first, so the ins find room
    for (const ObjectInfo& o : objects) {
      const ObjectKey key = plan_key(o.key, o.id, /*made_before_step=*/true);  // as Plan::start names it
      if (std::ranges::binary_search(plan_.stay_put, key)) continue;           // never moved by a plan
      auto want = plan_.start.find(key);
      if (want != plan_.start.end()) {
        MoveOptions options;
        if (auto first = plan_.places.first.find(key); first != plan_.places.first.end())
          options.place = place_on(want->second, first->second);
        if (want->second == o.tier && o.bytes_by_tier.empty() && !options.place) continue;
        if ((want->second == plan_.fast) != (pass == 1)) continue;
        if (!move_(o.id, want->second, options)) ++failed;
        continue;
      }
      if (plan_.segment_bytes == 0 || o.small) continue;
      // A page-granular plan names the segments (a move of one already there moves nothing).
      const std::uint64_t segments = segment_count(o.reserved_bytes);
      for (std::uint32_t k = 0; k < segments; ++k) {
        auto part = plan_.start.find(part_key(o.key, k));
        if (part == plan_.start.end() || (part->second == plan_.fast) != (pass == 1)) continue;
        MoveOptions options;
        options.segment = k;
        if (!move_(o.id, part->second, options)) ++failed;
      }
    }
  }
  return failed;
}

std::optional<ObjectId> Executor::id_of(ObjectKey key) {
  if (!is_step_key(key)) return key;  // objects made outside steps are keyed by their id
  std::lock_guard lock(ids_mutex_);
  auto it = ids_.find(key);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

void Executor::set_off_plan() {
  set_off_plan(step_.load(std::memory_order_acquire));
}

void Executor::set_off_plan(std::uint64_t step) {
  if (off_plan_step_.exchange(step, std::memory_order_acq_rel) == step) return;
  std::lock_guard lock(stats_mutex_);
  ++stats_.off_plan_steps;
}

void Executor::enqueue(std::uint32_t after_layer) {
  const std::uint64_t step = step_.load(std::memory_order_acquire);
  if (off_plan()) return;
  auto [lo, hi] = by_layer_.equal_range(after_layer);
  std::uint64_t missing = 0;
  // Read before any of these moves can start: a pin after it means a layer may have used the object.
  const std::uint64_t pins_so_far = pin_sequence_ ? pin_sequence_() : 0;
  for (auto it = lo; it != hi; ++it) {
    const PlannedMove& m = *it->second;
    std::optional<ObjectId> id = id_of(whole_key(m.key));
    if (!id) {
      ++missing;
      continue;
    }
    Job job;
    job.id = *id;
    job.to = m.to;
    job.segment = segment_of(m.key);
    job.step = m.needed_by >= layers_ ? step + 1 : step;
    job.needed_by = m.needed_by >= layers_ ? m.needed_by - layers_ : m.needed_by;
    job.useful_until = m.useful_until == kStepStart ? kStepStart
                       : m.useful_until >= layers_  ? m.useful_until - layers_
                                                    : m.useful_until;
    if (m.discard) job.discard_unless_pinned_after = pins_so_far;
    job.place = m.place;
    if (m.to != plan_.fast) {
      job.out_bytes = m.bytes;
      queued_out_bytes_.fetch_add(m.bytes, std::memory_order_acq_rel);
    }
    queue_->jobs.push(job);
  }
  if (missing != 0) {
    std::lock_guard lock(stats_mutex_);
    stats_.missing += missing;
  }
}

std::string Executor::mover_cpu_problem() const {
  std::lock_guard lock(mover_cpu_mutex_);
  return mover_cpu_problem_;
}

void Executor::run() {
  while (true) {
    Job job;
    queue_->jobs.pop(job);
    if (job.stop) break;
    // Counted until the move ends (or is dropped): the allocator's leaving bytes count it too
    // meanwhile, so a room wait sees no gap between the two.
    struct OutDone {
      std::atomic<std::uint64_t>& queued;
      std::uint64_t bytes;
      ~OutDone() { queued.fetch_sub(bytes, std::memory_order_acq_rel); }
    } out_done{queued_out_bytes_, job.out_bytes};
    const std::uint64_t now = step_.load(std::memory_order_acquire);
    if (job.step == now && off_plan_step_.load(std::memory_order_acquire) == now) {
      std::lock_guard lock(stats_mutex_);
      ++stats_.off_plan_dropped;
      continue;
    }
    // A move out into a place is never stale: its place is the next occupant's, and its object's
    // home is where the next step expects it.
    const bool stale = job.step < now && !(job.to != plan_.fast && place_on(job.to, job.place));
    const std::uint32_t begun = !stale && job.step == now ? layers_begun_() : 0;
    const bool useless = job.useful_until != kStepStart && begun > job.useful_until;
    if (stale || useless) {
      std::lock_guard lock(stats_mutex_);
      ++(stale ? stats_.stale_dropped : stats_.late_dropped);
      continue;
    }
    const bool late = begun > job.needed_by;
    MoveOptions options;
    options.segment = job.segment;
    options.discard_unless_pinned_after = job.discard_unless_pinned_after;
    options.place = place_on(job.to, job.place);
    // The place's previous occupant may be a free behind the plan (the training thread frees what a
    // layer leaves dead just after the layer ends): a short wait, so the mover is not held up.
    if (options.place) options.occupant_wait = kOccupantWait;
    const auto move_start = std::chrono::steady_clock::now();
    Result<MoveResult> moved = move_(job.id, job.to, options);
    const auto busy_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - move_start);
    std::lock_guard lock(stats_mutex_);
    stats_.mover_busy_ns += static_cast<std::uint64_t>(busy_ns.count());
    if (!moved && moved.status().code() == StatusCode::kNotFound) {
      ++stats_.missing;  // freed since the move was handed out: nothing to move
    } else if (!moved) {
      ++stats_.failed_moves;
      stats_.last_failure = moved.status().message();
    } else if (moved->moved) {
      ++stats_.moves;
      if (job.segment != kWholeObject) ++stats_.segment_moves;
      if (moved->discarded) ++stats_.discarded_moves;
      if (late) ++stats_.late_moves;
      (moved->to == plan_.fast ? stats_.bytes_in : stats_.bytes_out) += moved->bytes;
      if (!moved->discarded && !moved->clean) stats_.copied_bytes += moved->bytes;
    }
    stats_.mover_cpu_ns = thread_cpu_ns();
  }
  std::lock_guard lock(stats_mutex_);
  stats_.mover_cpu_ns = thread_cpu_ns();
}

void Executor::on_step_begin(std::uint64_t step) {
  step_.store(step, std::memory_order_release);
  {
    std::lock_guard lock(stats_mutex_);
    step_start_ = stats_;
  }
  if (state() != ExecutorState::kRunning) return;
  {
    std::lock_guard lock(stats_mutex_);
    ++stats_.steps;
  }
  enqueue(kStepStart);
}

void Executor::on_step_end(const StepEndEvent&) {
  std::lock_guard lock(stats_mutex_);
  const ExecutorStats step = since(stats_, step_start_);
  stats_.last_step_bytes_in = step.bytes_in;
  stats_.last_step_bytes_out = step.bytes_out;
  stats_.last_step_failed = step.failed_moves;
  stats_.last_step_late = step.late_dropped;
}

void Executor::on_layer_end(const LayerEndEvent& event) {
  if (state() == ExecutorState::kRunning) enqueue(event.index);
}

void Executor::on_allocate(const ObjectInfo& object, const SpanView&) {
  if (!is_step_key(object.key)) return;
  std::lock_guard lock(ids_mutex_);
  ids_[object.key] = object.id;
  keys_[object.id] = object.key;
}

void Executor::on_free(ObjectId id, const SpanView&) {
  std::lock_guard lock(ids_mutex_);
  auto it = keys_.find(id);
  if (it == keys_.end()) return;
  ids_.erase(it->second);
  keys_.erase(it);
}

std::optional<TierIndex> Executor::placement(ObjectKey key, std::size_t) {
  if (state() != ExecutorState::kRunning || off_plan()) return std::nullopt;
  auto it = plan_.birth.find(key);
  if (it == plan_.birth.end() && plan_.segment_bytes != 0) it = plan_.birth.find(part_key(key, 0));
  if (it == plan_.birth.end()) return std::nullopt;
  return it->second;
}

std::optional<std::uint64_t> Executor::arena_offset(ObjectKey key, std::size_t) {
  if (state() != ExecutorState::kRunning || off_plan()) return std::nullopt;
  auto it = plan_.region_offsets.find(key);
  if (it == plan_.region_offsets.end()) return std::nullopt;
  return it->second;
}

std::optional<Place> Executor::place_on(TierIndex tier, std::uint64_t offset) const {
  if (offset == kNoPlace || fast_arena_ == 0 || home_arena_ == 0) return std::nullopt;
  if (tier == plan_.fast) return Place{fast_arena_, offset};
  if (tier == plan_.slow) return Place{home_arena_, offset};
  return std::nullopt;
}

std::optional<Place> Executor::place(ObjectKey key, std::size_t) {
  if (state() != ExecutorState::kRunning || off_plan()) return std::nullopt;
  auto first = plan_.places.first.find(key);
  if (first == plan_.places.first.end()) return std::nullopt;
  auto born = plan_.birth.find(key);
  return place_on(born != plan_.birth.end() ? born->second : plan_.fast, first->second);
}

}  // namespace tensortier::migrator
