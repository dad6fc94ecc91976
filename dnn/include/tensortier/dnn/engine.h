// The dnn engine's execution context: the Backend that computes the layers, tensors that are
// runtime objects, and the oneDNN engine and stream the CPU backend's primitives run on.
//
// Every buffer the training engine uses (activations, weights, gradients, workspaces,
// scratchpads, optimizer state) is a Tensor: a runtime object with a name and a lifetime group,
// plus the oneDNN memory descriptor that says how its bytes are laid out. A Tensor knows its
// object by id; its address is the runtime's current one (refreshed whenever the runtime reports
// that a move gave some object a new address). run() executes one primitive as one runtime
// layer: it marks the layer with exactly the objects the primitive reads and writes (which pins
// them), takes their addresses from layer_begin, and rebinds the primitive's memory arguments to
// them (memory::set_data_handle on one dnnl::memory per primitive argument, made once), so an
// object may move between layers. Host code reads and writes tensors inside host_layer, or
// through write_from_host / read_to_host, which reach device memory by copies.
//
// A tensor's layout is a oneDNN memory descriptor on every backend (a backend that is not oneDNN
// uses plain ones: nchw, nc, x).
//
// Ownership: an Engine borrows the Runtime (which must outlive it), or has none (the baseline), and
// the Backend. A Tensor owns
// its object: Engine::release() frees it; a Tensor still holding an object at destruction frees it too.
// Thread safety: one Engine per training thread; not safe to share.
#pragma once

#include <dnnl.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tensortier/runtime.h"

namespace tensortier::dnn {

// Lifetime classes the engine allocates in; small objects of one class share pages.
enum Group : GroupId {
  kParams = 1,          // weights and biases: live across steps
  kParamGrads = 2,      // their gradients: from their layer's backward to their SGD update
                        // (across steps with Network::set_keep_gradients)
  kOptimizerState = 3,  // SGD momentum: live across steps
  kActivations = 4,     // forward outputs: born in forward, die after their last forward reader
                        // or, where a backward reads them, in backward (recomputed: born again)
  kGradients = 5,       // gradients of activations: born and die within backward
  kWorkspaces = 6,      // pooling / batch-norm state (and fused ReLU masks) kept for backward
  kScratchpads = 7,     // oneDNN scratchpads (user mode): born before their primitive runs, freed after
  kBatch = 8,           // input batch and labels
};

class Engine;
class Backend;  // backend.h

// How convolutions are computed. oneDNN's Winograd F(4x4, 3x3) convolutions do about 2.25x fewer
// multiplications than direct ones for 3x3 stride-1 kernels, but transform every tile first, so
// they pay only on large enough maps and channel counts.
enum class ConvAlgorithm {
  kDirect,  // oneDNN's direct convolutions everywhere (as PyTorch 1.13 runs them)
  // Winograd where it measured faster here (bench/compare_pytorch.sh, docs/RESULTS.md): 3x3,
  // stride 1, input and output channels multiples of 16, outputs of at least 8x8; direct
  // elsewhere, and wherever oneDNN has no optimized Winograd kernel for the shape.
  kAuto,
};
// What the engine does to hold less, each on by default and each for networks built after it is
// set (Engine::set_memory_options; tensortier/dnn/memory_flags.h puts them on a command line).
struct MemoryOptions {
  // ReLUs and residual adds run in place where the graph allows (the first input read by nothing
  // else, and its producer's backward not reading its output): the layer writes over that
  // input's object, as torchvision's ReLU(inplace=True) and `out += identity`; an in-place ReLU's
  // backward reads its output instead of its input. Results are bit-identical either way.
  bool in_place = true;
  // A batch norm applies the ReLU that alone reads it (oneDNN's fuse_norm_relu: one pass instead
  // of two each way, a one-bit mask per element kept for backward in blocked layouts). Results
  // agree to float rounding.
  bool fuse_batch_norm_relu = true;
  // A batch norm's output that only later layers' backward reads (the convolution after it: its
  // input) is freed after its last forward reader and computed again from the batch norm's input
  // and the batch's statistics before that backward (Layer::recompute): one tensor less per batch
  // norm kept across the step, for an elementwise pass in backward. Results agree to float
  // rounding.
  bool recompute_batch_norm = true;

  // None of them: the engine before issue 38 (with Network::set_free_after_last_reader(false)
  // and set_keep_gradients(true)).
  static MemoryOptions none() { return {false, false, false}; }
};

// "direct" or "auto"; anything else is an error naming both.
Result<ConvAlgorithm> parse_conv_algorithm(std::string_view name);
std::string_view to_string(ConvAlgorithm algorithm);

// A runtime object holding a tensor's bytes, with its oneDNN layout.
class Tensor {
 public:
  Tensor() = default;
  ~Tensor();
  Tensor(Tensor&& other) noexcept { *this = std::move(other); }
  Tensor& operator=(Tensor&& other) noexcept;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  bool empty() const { return address_ == nullptr; }
  const dnnl::memory::desc& desc() const { return desc_; }
  const std::string& name() const { return name_; }
  ObjectId id() const { return id_; }  // 0 for plain memory
  // The object's current address (looked up again only after a move gave some object a new one).
  // Valid until the next move of this object: hold it only inside a layer, where the object is
  // pinned, or while no mover runs. Single-threaded: the training thread's calls only.
  void* address() const;
  float* data() const { return static_cast<float*>(address()); }
  std::size_t bytes() const { return desc_.get_size(); }
  std::size_t elements() const { return bytes() / sizeof(float); }
  dnnl::memory::dims dims() const { return desc_.dims(); }

 private:
  friend class Engine;
  class Backend;                // backend.h
  Runtime* runtime_ = nullptr;  // the owner of its object; null for plain memory (std::free)
  dnnl::memory::desc desc_;
  std::string name_;
  ObjectId id_ = 0;
  mutable void* address_ = nullptr;             // current as of relocations_seen_
  mutable std::uint64_t relocations_seen_ = 0;  // Runtime::relocations() when address_ was read
};

// One primitive argument: oneDNN's argument index and the tensor bound to it.
using Arg = std::pair<int, const Tensor*>;

// A primitive's scratchpad (user scratchpad mode): the object Engine::run allocates for each
// execution of the primitive and frees after it, so that scratchpads take memory only while
// their primitive runs (a Winograd convolution's are tens of MiB). A desc of no bytes: none.
struct Scratchpad {
  std::string name;
  dnnl::memory::desc desc;
};

class Engine {
 public:
  // On the CPU backend (cpu_backend()), or on `backend`, which must outlive the engine.
  explicit Engine(Runtime& runtime);
  Engine(Runtime& runtime, Backend& backend);
  // The baseline that measures the runtime's own cost: tensors from plain aligned allocation
  // (std::aligned_alloc, 64-byte aligned), no layer marks, the CPU backend. Nothing else differs.
  static Engine without_runtime();

  Runtime* runtime() { return runtime_; }
  // What makes the Network's layers and computes its loss and SGD (backend.h).
  Backend& backend() { return *backend_; }
  // The oneDNN CPU engine and stream: the CPU backend's layers run on them.
  const dnnl::engine& cpu() const { return engine_; }
  dnnl::stream& stream() { return stream_; }

  // The convolution algorithm layers built from now on use (default kAuto). Layers already built
  // keep theirs.
  void set_conv_algorithm(ConvAlgorithm algorithm) { conv_algorithm_ = algorithm; }
  ConvAlgorithm conv_algorithm() const { return conv_algorithm_; }
  // What networks built from now on do to hold less (MemoryOptions; all on by default).
  void set_memory_options(const MemoryOptions& options) { memory_ = options; }
  const MemoryOptions& memory_options() const { return memory_; }
  // The most bytes of live runtime objects at any moment no primitive runs (sampled after each
  // allocation outside run()): the runtime's peak without the scratchpads that live only inside
  // one primitive. PyTorch's profile_memory figure nets such allocations the same way. 0 without
  // a runtime.
  std::uint64_t peak_live_bytes_between_primitives() const { return peak_between_primitives_bytes_; }

  // A new zero-filled tensor of `desc`'s size in `group` (`zero` false: its bytes are whatever
  // the memory held, for a tensor written before it is read; junk where set_junk_fill is on).
  // Errors come from the runtime.
  Result<Tensor> allocate(std::string_view name, const dnnl::memory::desc& desc, Group group,
                          bool zero = true);
  // Tensors allocated with `zero` false get every byte 0xFF (a NaN in float32) where the host can
  // address them (not device tiers): a test's way to show that no layer reads bytes it was not
  // given. Off by default (then they hold whatever the memory held).
  void set_junk_fill(bool on) { junk_fill_ = on; }
  // Frees the tensor's object (no-op on an empty tensor).
  void release(Tensor& tensor);

  // Executes `primitive` as runtime layer `layer`, reading `reads` and writing `writes` (an
  // argument both read and written goes in writes; declare it in both to say so). A primitive
  // with a scratchpad gets a fresh one, uninitialized, declared as written (DNNL_ARG_SCRATCHPAD),
  // freed when the layer ends. Waits for the stream before the layer ends.
  Status run(std::string_view layer, const dnnl::primitive& primitive, const std::vector<Arg>& reads,
             std::vector<Arg> writes, const Scratchpad& scratchpad = {});
  // Runs host code that reads or writes these tensors outside any layer (a data loader filling a
  // batch between steps) with their objects pinned, so no move runs under it.
  Status host_access(const std::vector<const Tensor*>& tensors, const std::function<void()>& body);
  // Host code's bytes into tensors wherever they live: `fill` writes every byte of each
  // (bytes[k]: tensor k's, tensors[k]->bytes() long). Host tensors are written in place, pinned
  // (host_access); where the runtime has a device tier, into host buffers then copied in
  // (Runtime::write_object), since the host cannot address device memory.
  Status write_from_host(const std::vector<const Tensor*>& tensors,
                         const std::function<void(const std::vector<void*>& bytes)>& fill);
  // The tensor's bytes to host code (`use` reads them): in place, pinned, or a host copy where the
  // runtime has a device tier.
  Status read_to_host(const Tensor& tensor, const std::function<void(const void* bytes)>& use);
  // Marks a layer around host code (loss, SGD) that reads and writes these tensors.
  Status host_layer(std::string_view layer, const std::vector<const Tensor*>& reads,
                    const std::vector<const Tensor*>& writes, const std::function<void()>& body);

  // Copies `src` (layout `from`) into `dst` (layout `to`) with a oneDNN reorder, now and outside
  // any layer mark: for build-time initialization and for exporting tensors in PyTorch's layout.
  Status reorder_now(const dnnl::memory::desc& from, const void* src, const dnnl::memory::desc& to,
                     void* dst);

  // A primitive attribute with user-mode scratchpad (scratchpads become runtime objects).
  static dnnl::primitive_attr user_scratchpad();

 private:
  Engine(Runtime* runtime, Backend& backend);
  // Whether the runtime has a device tier (host code then reaches tensors through copies).
  bool device_tier() const;

  // The memory arguments of each primitive, made once and rebound to the tensors' addresses at
  // every run (keyed by the primitive's handle, which lives as long as its layer).
  struct BoundArgs {
    std::unordered_map<int, dnnl::memory> memories;
  };
  // Marks the layer begun and returns the primitive's memory arguments, rebound.
  Result<std::unordered_map<int, dnnl::memory>*> bind(std::string_view layer,
                                                      const dnnl::primitive& primitive,
                                                      const std::vector<Arg>& reads,
                                                      const std::vector<Arg>& writes);

  // runtime_->layer_begin over ids_ (the first `read_count` read, the rest written), filling
  // addresses_.
  Status begin_layer(std::string_view layer, std::size_t read_count);

  Runtime* runtime_;  // null: plain allocation, no marks
  Backend* backend_;  // borrowed
  ConvAlgorithm conv_algorithm_ = ConvAlgorithm::kAuto;
  MemoryOptions memory_;
  bool junk_fill_ = false;
  std::uint64_t peak_between_primitives_bytes_ = 0;
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::unordered_map<const void*, BoundArgs> bound_;
  std::vector<ObjectId> ids_;     // scratch of run() and host_layer()
  std::vector<void*> addresses_;  // scratch of run() and host_layer()
};

}  // namespace tensortier::dnn
