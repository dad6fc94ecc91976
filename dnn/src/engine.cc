// Engine: tensors as runtime objects, and primitives run as marked layers (see engine.h).
#include "tensortier/dnn/engine.h"

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "tensortier/dnn/backend.h"

namespace tensortier::dnn {

namespace {
// By id where the runtime holds it: a mover may copy it elsewhere between reading its address
// and the free, and another tensor be born where it was.
void free_tensor_memory(Runtime* runtime, ObjectId id, void* address) {
  if (address == nullptr) return;
  if (runtime != nullptr) {
    (void)runtime->free(id);
  } else {
    std::free(address);
  }
}
}  // namespace

void* Tensor::address() const {
  if (runtime_ != nullptr && address_ != nullptr) {
    const std::uint64_t now = runtime_->relocations();
    if (now != relocations_seen_) {
      if (Result<void*> current = runtime_->address_of(id_); current) address_ = current.value();
      relocations_seen_ = now;
    }
  }
  return address_;
}

Tensor::~Tensor() {
  free_tensor_memory(runtime_, id_, address_);
}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this != &other) {
    free_tensor_memory(runtime_, id_, address_);
    runtime_ = std::exchange(other.runtime_, nullptr);
    desc_ = other.desc_;
    name_ = std::move(other.name_);
    id_ = std::exchange(other.id_, 0);
    address_ = std::exchange(other.address_, nullptr);
    relocations_seen_ = other.relocations_seen_;
  }
  return *this;
}

Result<ConvAlgorithm> parse_conv_algorithm(std::string_view name) {
  if (name == "direct") return ConvAlgorithm::kDirect;
  if (name == "auto") return ConvAlgorithm::kAuto;
  return invalid_argument(fmt::format(
      "convolution algorithm '{}' is unknown: use 'auto' (Winograd where it pays) or 'direct'", name));
}

std::string_view to_string(ConvAlgorithm algorithm) {
  return algorithm == ConvAlgorithm::kDirect ? "direct" : "auto";
}

Engine::Engine(Runtime& runtime) : Engine(&runtime, cpu_backend()) {}

Engine::Engine(Runtime& runtime, Backend& backend) : Engine(&runtime, backend) {}

Engine Engine::without_runtime() {
  return Engine(nullptr, cpu_backend());
}

Engine::Engine(Runtime* runtime, Backend& backend)
    : runtime_(runtime), backend_(&backend), engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

dnnl::primitive_attr Engine::user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

Result<Tensor> Engine::allocate(std::string_view name, const dnnl::memory::desc& desc, Group group,
                                bool zero) {
  const std::size_t bytes = desc.get_size();
  Tensor tensor;
  if (runtime_ != nullptr) {
    tensor.relocations_seen_ = runtime_->relocations();
    auto object = runtime_->allocate(name, bytes, group);
    if (!object) return object.status();
    if (const Tier& tier = runtime_->tier(object->tier);
        tier.range_kind() == RangeKind::kDevice && !backend_->uses_device_memory()) {
      (void)runtime_->free(object->id);
      return failed_precondition(fmt::format(
          "'{}' was placed on tier '{}', device memory, and the {} backend's layers run on the host, which "
          "cannot read it: give host tiers (dram, numa, emulated, pinned) for this backend",
          name, tier.name(), backend_->name()));
    }
    tensor.address_ = object->address;
    tensor.id_ = object->id;
    if (group != kScratchpads) {  // no scratchpad lives outside run(), which frees its own
      peak_between_primitives_bytes_ = std::max(peak_between_primitives_bytes_, runtime_->live_bytes());
    }
  } else {
    tensor.address_ = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (tensor.address_ == nullptr)
      return out_of_memory(fmt::format("'{}': aligned_alloc of {} bytes failed", name, bytes));
  }
  if (zero && device_tier()) {
    if (Status zeroed = runtime_->zero_object(tensor.id_); !zeroed.is_ok()) {
      (void)runtime_->free(tensor.id_);
      return zeroed;
    }
  } else if (zero) {
    std::memset(tensor.address_, 0, bytes);
  } else if (junk_fill_ && !device_tier()) {
    std::memset(tensor.address_, 0xFF, bytes);
  }
  tensor.runtime_ = runtime_;
  tensor.desc_ = desc;
  tensor.name_ = std::string(name);
  return tensor;
}

void Engine::release(Tensor& tensor) {
  Tensor dropped = std::move(tensor);  // its destructor frees the object
}

Result<std::unordered_map<int, dnnl::memory>*> Engine::bind(std::string_view layer,
                                                            const dnnl::primitive& primitive,
                                                            const std::vector<Arg>& reads,
                                                            const std::vector<Arg>& writes) {
  ids_.clear();
  for (const auto* list : {&reads, &writes}) {
    for (const auto& [index, tensor] : *list) {
      if (tensor == nullptr || tensor->empty()) {
        return invalid_argument(fmt::format("layer '{}': argument {} has no tensor", layer, index));
      }
      ids_.push_back(tensor->id());
    }
  }
  if (runtime_ != nullptr) {
    // Pins the objects and gives their addresses now: objects may have moved since the last step.
    TENSORTIER_RETURN_IF_ERROR(begin_layer(layer, reads.size()));
  } else {
    addresses_.assign(ids_.size(), nullptr);
    std::size_t i = 0;
    for (const auto* list : {&reads, &writes}) {
      for (const auto& [index, tensor] : *list) addresses_[i++] = tensor->address();
    }
  }
  auto& memories = bound_[primitive.get()].memories;
  std::size_t i = 0;
  for (const auto* list : {&reads, &writes}) {
    for (const auto& [index, tensor] : *list) {
      void* address = addresses_[i++];
      auto it = memories.find(index);
      if (it == memories.end() || it->second.get_desc() != tensor->desc()) {
        memories.insert_or_assign(index, dnnl::memory(tensor->desc(), engine_, address));
      } else {
        it->second.set_data_handle(address);
      }
    }
  }
  return &memories;
}

Status Engine::begin_layer(std::string_view layer, std::size_t read_count) {
  addresses_.assign(ids_.size(), nullptr);
  return runtime_->layer_begin(layer, std::span<const ObjectId>(ids_.data(), read_count),
                               std::span<const ObjectId>(ids_.data() + read_count, ids_.size() - read_count),
                               addresses_);
}

Status Engine::run(std::string_view layer, const dnnl::primitive& primitive, const std::vector<Arg>& reads,
                   std::vector<Arg> writes, const Scratchpad& scratchpad) {
  Tensor pad;  // freed when run returns, after the layer ended
  if (scratchpad.desc.get_size() != 0) {
    auto t = allocate(scratchpad.name, scratchpad.desc, kScratchpads, /*zero=*/false);
    if (!t) return t.status();
    pad = std::move(t).value();
    writes.emplace_back(DNNL_ARG_SCRATCHPAD, &pad);
  }
  Result<std::unordered_map<int, dnnl::memory>*> args = bind(layer, primitive, reads, writes);
  if (!args) return args.status();
  try {
    primitive.execute(stream_, *args.value());
    stream_.wait();
  } catch (const dnnl::error& e) {
    if (runtime_ != nullptr) (void)runtime_->layer_end();
    return internal_error(
        fmt::format("layer '{}': oneDNN: {} (status {})", layer, e.what(), static_cast<int>(e.status)));
  }
  return runtime_ != nullptr ? runtime_->layer_end() : Status::ok();
}

Status Engine::reorder_now(const dnnl::memory::desc& from, const void* src, const dnnl::memory::desc& to,
                           void* dst) {
  try {
    dnnl::memory in(from, engine_, const_cast<void*>(src));  // NOLINT: oneDNN takes void*, reads only
    dnnl::memory out(to, engine_, dst);
    dnnl::reorder(in, out).execute(stream_, in, out);
    stream_.wait();
  } catch (const dnnl::error& e) {
    return internal_error(fmt::format("reorder: oneDNN: {}", e.what()));
  }
  return Status::ok();
}

Status Engine::host_access(const std::vector<const Tensor*>& tensors, const std::function<void()>& body) {
  if (runtime_ == nullptr) {
    body();
    return Status::ok();
  }
  std::vector<ObjectId> ids;
  ids.reserve(tensors.size());
  for (const Tensor* t : tensors) ids.push_back(t->id());
  std::vector<void*> addresses(ids.size());
  TENSORTIER_RETURN_IF_ERROR(runtime_->pin_objects(ids, addresses));
  body();  // the tensors' address() is current: they cannot move while pinned
  runtime_->unpin_objects(ids);
  return Status::ok();
}

bool Engine::device_tier() const {
  return runtime_ != nullptr && runtime_->device_stream() != 0;
}

Status Engine::write_from_host(const std::vector<const Tensor*>& tensors,
                               const std::function<void(const std::vector<void*>& bytes)>& fill) {
  std::vector<void*> bytes;
  if (!device_tier()) {
    return host_access(tensors, [&] {
      for (const Tensor* t : tensors) bytes.push_back(t->address());
      fill(bytes);
    });
  }
  std::vector<std::vector<std::byte>> staging;
  for (const Tensor* t : tensors) bytes.push_back(staging.emplace_back(t->bytes()).data());
  fill(bytes);
  for (std::size_t k = 0; k < tensors.size(); ++k)
    TENSORTIER_RETURN_IF_ERROR(runtime_->write_object(tensors[k]->id(), 0, bytes[k], tensors[k]->bytes()));
  return Status::ok();
}

Status Engine::read_to_host(const Tensor& tensor, const std::function<void(const void* bytes)>& use) {
  if (!device_tier()) return host_access({&tensor}, [&] { use(tensor.address()); });
  std::vector<std::byte> copy(tensor.bytes());
  TENSORTIER_RETURN_IF_ERROR(runtime_->read_object(tensor.id(), 0, copy.data(), copy.size()));
  use(copy.data());
  return Status::ok();
}

Status Engine::host_layer(std::string_view layer, const std::vector<const Tensor*>& reads,
                          const std::vector<const Tensor*>& writes, const std::function<void()>& body) {
  if (runtime_ == nullptr) {
    body();
    return Status::ok();
  }
  ids_.clear();
  for (const Tensor* t : reads) ids_.push_back(t->id());
  for (const Tensor* t : writes) ids_.push_back(t->id());
  // The body reaches the tensors through Tensor::address(), current while they are pinned.
  TENSORTIER_RETURN_IF_ERROR(begin_layer(layer, reads.size()));
  body();
  return runtime_->layer_end();
}

}  // namespace tensortier::dnn
