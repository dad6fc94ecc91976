// CudaCopyEngine (see copy_engine.h).
#include "tensortier/gpu/copy_engine.h"

#include <iterator>

namespace tensortier::gpu {

StreamHandle CudaCopyEngine::stream_for(CopyKind kind) const {
  return kind == CopyKind::kDeviceToHost ? device_.to_host() : device_.to_device();
}

Result<EventHandle> CudaCopyEngine::copy(void* dst, const void* src, std::size_t bytes, CopyKind kind,
                                         std::span<const EventHandle> after) {
  const CudaApi& api = device_.api();
  const StreamHandle stream = stream_for(kind);
  TENSORTIER_RETURN_IF_ERROR(device_.make_current());  // the mover's thread may not have it current
  for (EventHandle e : after) {
    if (e != 0) TENSORTIER_RETURN_IF_ERROR(device_.wait(stream, e));
  }
  TENSORTIER_RETURN_IF_ERROR(
      cuda_status(api, api.memcpy_async(dst, src, bytes, kind, stream), "cudaMemcpyAsync"));
  return device_.record(stream);
}

bool CudaCopyEngine::done(EventHandle event) const {
  return device_.api().event_query(event) == 0;
}

CopyKind CudaMoveEngine::kind_of(CopyRoute route) const {
  const bool from_device = route.from == device_tier_, to_device = route.to == device_tier_;
  if (from_device) return to_device ? CopyKind::kDeviceToDevice : CopyKind::kDeviceToHost;
  return to_device ? CopyKind::kHostToDevice : CopyKind::kHostToHost;
}

CudaMoveEngine::~CudaMoveEngine() {
  std::lock_guard lock(mutex_);
  last_use_.clear();  // the events go back to the device, which outlives this
}

CudaMoveEngine::LastUses::iterator CudaMoveEngine::first_overlap_locked(std::uintptr_t begin) {
  auto it = last_use_.lower_bound(begin);
  if (it != last_use_.begin() && std::prev(it)->second.end > begin) --it;  // one that starts before
  return it;
}

void CudaMoveEngine::last_uses_locked(std::uintptr_t begin, std::uintptr_t end,
                                      std::vector<std::shared_ptr<EventHandle>>& out) {
  for (auto it = first_overlap_locked(begin); it != last_use_.end() && it->first < end; ++it)
    out.push_back(it->second.event);
}

void CudaMoveEngine::layer_used(std::span<const UsedRange> ranges) {
  if (ranges.empty()) return;
  Result<EventHandle> recorded = device_.record(device_.compute());
  if (!recorded) {  // no event to wait for: the layer's work is waited for here instead
    if (!device_.synchronize_stream(device_.compute()).is_ok()) {
      std::lock_guard lock(mutex_);
      unordered_ = true;
    }
    return;
  }
  Device* device = &device_;
  auto event = std::shared_ptr<EventHandle>(new EventHandle(recorded.value()), [device](EventHandle* e) {
    device->release(*e);
    delete e;
  });
  std::lock_guard lock(mutex_);
  for (const UsedRange& r : ranges) {
    const auto begin = reinterpret_cast<std::uintptr_t>(r.address);
    const std::uintptr_t end = begin + r.bytes;
    // Cut what overlaps [begin, end) out of the ranges known, keeping their parts outside it.
    auto it = first_overlap_locked(begin);
    std::vector<std::pair<std::uintptr_t, LastUse>> keep;
    while (it != last_use_.end() && it->first < end) {
      if (it->first < begin) keep.emplace_back(it->first, LastUse{begin, it->second.event});
      if (it->second.end > end) keep.emplace_back(end, LastUse{it->second.end, it->second.event});
      it = last_use_.erase(it);
    }
    for (auto& [b, use] : keep) last_use_.emplace(b, std::move(use));
    last_use_.emplace(begin, LastUse{end, event});
  }
}

std::size_t CudaMoveEngine::tracked_ranges() const {
  std::lock_guard lock(mutex_);
  return last_use_.size();
}

unsigned CudaMoveEngine::copy(void* to, const void* from, std::size_t bytes, CopyRoute route) {
  std::vector<std::shared_ptr<EventHandle>> uses;  // held until the copy is issued
  {
    std::lock_guard lock(mutex_);
    if (unordered_) return 0;  // a layer's work may still be under way on these bytes
    const auto src = reinterpret_cast<std::uintptr_t>(from), dst = reinterpret_cast<std::uintptr_t>(to);
    last_uses_locked(src, src + bytes, uses);
    last_uses_locked(dst, dst + bytes, uses);
  }
  std::vector<EventHandle> after;
  after.reserve(uses.size());
  for (const auto& e : uses) after.push_back(*e);
  Result<EventHandle> done = engine_.copy(to, from, bytes, kind_of(route), after);
  if (!done) return 0;
  const Status waited = device_.synchronize(done.value());
  device_.release(done.value());
  return waited.is_ok() ? 1 : 0;
}

}  // namespace tensortier::gpu
