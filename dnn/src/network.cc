// Network: graph forward/backward, softmax cross-entropy and SGD (see network.h).
#include "tensortier/dnn/network.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tensortier::dnn {

int Network::add(LayerSpec spec, std::vector<int> inputs) {
  nodes_.push_back(Node{std::move(spec), nullptr, std::move(inputs), {}, {}, {}});
  return static_cast<int>(nodes_.size()) - 1;
}

Status Network::build(Engine& engine, const dnnl::memory::dims& input_dims, std::uint64_t seed) {
  if (nodes_.empty()) return failed_precondition(fmt::format("network '{}' has no layers", name_));
  if (built_) return failed_precondition(fmt::format("network '{}' is built already", name_));
  if (input_dims.size() != 4) return invalid_argument("network input must be N,C,H,W");
  for (Node& node : nodes_) {
    auto layer = engine.backend().make_layer(node.spec);
    if (!layer) return layer.status();
    node.layer = std::move(layer).value();
  }
  const MemoryOptions& memory = engine.memory_options();
  if (memory.fuse_batch_norm_relu) fuse_relus();
  if (memory.in_place) choose_in_place();
  recompute_ = memory.recompute_batch_norm;
  TENSORTIER_RETURN_IF_ERROR(use_shape(engine, input_dims));
  for (Node& node : nodes_) TENSORTIER_RETURN_IF_ERROR(node.layer->init_params(engine, seed));
  const auto& logits = nodes_.back().output_desc.dims();
  if (logits.size() != 2)
    return invalid_argument(fmt::format("network '{}' must end in N x classes logits", name_));
  input_dims_ = input_dims;
  built_ = true;
  return Status::ok();
}

// How many nodes read each node's output (an input listed twice counts twice).
std::vector<int> Network::readers() const {
  std::vector<int> count(nodes_.size(), 0);
  for (const Node& node : nodes_) {
    for (int j : node.inputs) {
      if (j >= 0 && static_cast<std::size_t>(j) < nodes_.size()) ++count[static_cast<std::size_t>(j)];
    }
  }
  return count;
}

void Network::fuse_relus() {
  const std::vector<int> readers = this->readers();
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    Node& node = nodes_[i];
    if (!node.layer->is_relu() || node.inputs.size() != 1 || node.inputs[0] < 0 ||
        static_cast<std::size_t>(node.inputs[0]) >= i) {
      continue;
    }
    Node& producer = nodes_[static_cast<std::size_t>(node.inputs[0])];
    if (readers[static_cast<std::size_t>(node.inputs[0])] != 1 || producer.in_place_of >= 0 ||
        !producer.layer->fuse_relu()) {
      continue;
    }
    node.pass_through = true;
    node.in_place_of = node.inputs[0];
  }
}

void Network::choose_in_place() {
  const std::vector<int> readers = this->readers();
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    Node& node = nodes_[i];
    if (node.in_place_of >= 0) continue;  // passed through already
    if (!node.layer->can_run_in_place() || node.inputs.empty() || node.inputs[0] < 0 ||
        static_cast<std::size_t>(node.inputs[0]) >= i) {
      continue;
    }
    const int first = node.inputs[0];
    const auto j = static_cast<std::size_t>(first);
    if (readers[j] != 1 || nodes_[j].layer->backward_reads_output()) continue;
    // Another input in the same object (through an in-place chain) would be overwritten as read.
    const bool shares = std::any_of(node.inputs.begin() + 1, node.inputs.end(),
                                    [&](int k) { return k >= 0 && root_of(k) == root_of(first); });
    if (shares) continue;
    node.in_place_of = first;
    node.layer->set_in_place(true);
  }
}

// Each object (a root node's) is read in forward by the nodes that take any node of its in-place
// chain as input, the loss reading the last node's; some backward reads it where a reader's
// backward reads that input or a chain node's backward reads its output.
void Network::plan_lifetimes() {
  const std::size_t n = nodes_.size();
  std::vector<std::size_t> last(n);
  kept_for_backward_.assign(n, false);
  for (std::size_t i = 0; i < n; ++i) {
    last[i] = i;  // an output nothing reads is freed after its own forward
    if (!nodes_[i].pass_through && nodes_[i].layer->backward_reads_output())
      kept_for_backward_[static_cast<std::size_t>(root_of(static_cast<int>(i)))] = true;
  }
  last[static_cast<std::size_t>(root_of(static_cast<int>(n) - 1))] = n;  // the loss reads the logits
  for (std::size_t i = 0; i < n; ++i) {
    const Node& node = nodes_[i];
    for (std::size_t k = 0; k < node.inputs.size(); ++k) {
      if (node.inputs[k] == kInput) continue;
      const auto root = static_cast<std::size_t>(root_of(node.inputs[k]));
      last[root] = std::max(last[root], i);
      if (!node.pass_through && node.layer->backward_reads_input(k)) kept_for_backward_[root] = true;
    }
  }
  last_read_at_.assign(n + 1, {});
  for (std::size_t i = 0; i < n; ++i) {
    if (nodes_[i].in_place_of < 0) last_read_at_[last[i]].push_back(static_cast<int>(i));
  }
  // Recomputed: a root that can compute its output again, kept only for others' backward, whose
  // object no node writes over (its chain is at most a pass-through ReLU).
  std::vector<bool> written_over(n, false);
  for (std::size_t i = 0; i < n; ++i) {
    if (nodes_[i].in_place_of >= 0 && !nodes_[i].pass_through)
      written_over[static_cast<std::size_t>(root_of(static_cast<int>(i)))] = true;
  }
  for (std::size_t i = 0; i < n; ++i) {
    Node& node = nodes_[i];
    node.recomputed = recompute_ && free_after_last_reader_ && node.in_place_of < 0 &&
                      kept_for_backward_[i] && !written_over[i] && node.layer->can_recompute() &&
                      !node.layer->backward_reads_output();
  }
}

Status Network::recompute_inputs(Engine& engine, const Node& node) {
  for (int j : node.inputs) {
    if (j == kInput) continue;
    Node& source = nodes_[static_cast<std::size_t>(root_of(j))];
    if (!source.recomputed || !source.output.empty()) continue;
    auto out =
        engine.allocate(source.layer->name() + ".out", source.output_desc, kActivations, /*zero=*/false);
    if (!out) return out.status();
    source.output = std::move(out).value();
    std::vector<const Tensor*> in;
    for (int k : source.inputs) in.push_back(&output_of(k));
    TENSORTIER_RETURN_IF_ERROR(source.layer->recompute(engine, in, source.output));
  }
  return Status::ok();
}

void Network::release_read_by(Engine& engine, std::size_t position, bool training) {
  for (int root : last_read_at_[position]) {
    const Node& node = nodes_[static_cast<std::size_t>(root)];
    if (!training || (free_after_last_reader_ &&
                      (!kept_for_backward_[static_cast<std::size_t>(root)] || node.recomputed))) {
      engine.release(nodes_[static_cast<std::size_t>(root)].output);
    }
  }
}

Status Network::use_shape(Engine& engine, const dnnl::memory::dims& input_dims) {
  if (built_ && (input_dims.size() != 4 || !std::equal(input_dims.begin() + 1, input_dims.end(),
                                                       input_dims_.begin() + 1, input_dims_.end()))) {
    return invalid_argument(fmt::format(
        "network '{}' was built for inputs of {}x{}x{} (C x H x W) and got a batch of {}: only the batch "
        "size may change between batches",
        name_, input_dims_[1], input_dims_[2], input_dims_[3], fmt::join(input_dims, "x")));
  }
  current_dims_.clear();  // set again once every layer has its primitives for these dims
  const dnnl::memory::desc input(input_dims, dnnl::memory::data_type::f32, dnnl::memory::format_tag::nchw);
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    Node& node = nodes_[i];
    std::vector<dnnl::memory::desc> in;
    std::vector<Dims> in_dims;
    for (int j : node.inputs) {
      if (j != kInput && (j < 0 || static_cast<std::size_t>(j) >= i)) {
        return invalid_argument(
            fmt::format("layer '{}' reads node {}, which does not come before it", node.layer->name(), j));
      }
      in.push_back(j == kInput ? input : nodes_[static_cast<std::size_t>(j)].output_desc);
      in_dims.push_back(in.back().dims());
    }
    auto out = node.layer->build(engine, in);
    if (!out) return out.status();
    node.output_desc = out.value();
    // Every backend's layer gives its spec's shape (layer_spec.h), or the graph would not hold.
    const Result<Dims> expected = output_dims(node.spec, in_dims);
    if (!expected || expected.value() != node.output_desc.dims()) {
      return internal_error(fmt::format(
          "layer '{}' of the {} backend gives an output of {}, its spec {}", node.spec.name,
          engine.backend().name(), fmt::join(node.output_desc.dims(), "x"),
          expected ? fmt::format("{}", fmt::join(expected.value(), "x")) : expected.status().message()));
    }
  }
  plan_lifetimes();  // what a backward reads may depend on the layouts just chosen
  current_dims_ = input_dims;
  return Status::ok();
}

Status Network::forward(Engine& engine, const Tensor& images, bool training) {
  if (!built_) return failed_precondition(fmt::format("network '{}': call build() first", name_));
  if (images.dims() != current_dims_) TENSORTIER_RETURN_IF_ERROR(use_shape(engine, images.dims()));
  images_ = &images;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    Node& node = nodes_[i];
    std::vector<const Tensor*> in;
    for (int j : node.inputs) in.push_back(&output_of(j));
    if (node.in_place_of < 0) {
      // Not zeroed: every layer's forward writes all of its output (each oneDNN primitive, each
      // cuDNN call with beta = 0); Training.NoLayerReadsBytesItDidNotWrite checks it on the CPU.
      auto out = engine.allocate(node.layer->name() + ".out", node.output_desc, kActivations, /*zero=*/false);
      if (!out) return out.status();
      node.output = std::move(out).value();
    }
    if (!node.pass_through) {
      TENSORTIER_RETURN_IF_ERROR(node.layer->forward(engine, in, output_of(static_cast<int>(i)), training));
    }
    release_read_by(engine, i, training);
  }
  return Status::ok();
}

const Tensor& Network::output_of(int node) const {
  if (node == kInput) return *images_;
  return nodes_[static_cast<std::size_t>(root_of(node))].output;
}

int Network::root_of(int node) const {
  while (nodes_[static_cast<std::size_t>(node)].in_place_of >= 0)
    node = nodes_[static_cast<std::size_t>(node)].in_place_of;
  return node;
}

// Softmax cross-entropy over the logits, computed by the backend.
Result<StepResult> Network::loss(Engine& engine, const Batch& batch, bool with_gradient) {
  Node& last_node = nodes_.back();
  const Tensor& logits = output_of(static_cast<int>(nodes_.size()) - 1);
  if (with_gradient) {
    auto diff = engine.allocate(last_node.layer->name() + ".out.grad", last_node.output_desc, kGradients);
    if (!diff) return diff.status();
    last_node.diff = std::move(diff).value();
  }
  Result<StepResult> result = engine.backend().softmax_cross_entropy(
      engine, logits, batch.labels, with_gradient ? &last_node.diff : nullptr);
  if (!result) return result;
  release_read_by(engine, nodes_.size(), with_gradient);
  return result;
}

Status Network::backward(Engine& engine, const SgdOptions* sgd) {
  for (std::size_t i = nodes_.size(); i-- > 0;) {
    Node& node = nodes_[i];
    if (node.pass_through) {  // its producer applies it: the gradient passes on (its one reader's)
      nodes_[static_cast<std::size_t>(node.inputs[0])].diff = std::move(node.diff);
      continue;
    }
    TENSORTIER_RETURN_IF_ERROR(recompute_inputs(engine, node));
    const std::vector<Param*> params = node.layer->params();
    for (Param* p : params) {
      if (!p->grad.empty()) continue;  // kept from the step before
      // Not zeroed: every layer's backward writes all of its parameters' gradients.
      auto g = engine.allocate(p->value.name() + ".grad", p->value.desc(), kParamGrads, /*zero=*/false);
      if (!g) return g.status();
      p->grad = std::move(g).value();
    }
    std::vector<const Tensor*> in;
    std::vector<Tensor> fresh(node.inputs.size());  // gradients this node produces
    std::vector<Tensor*> diff_in;
    for (std::size_t k = 0; k < node.inputs.size(); ++k) {
      const int j = node.inputs[k];
      in.push_back(&output_of(j));
      if (j == kInput) {
        diff_in.push_back(nullptr);  // the batch needs no gradient
        continue;
      }
      Node& source = nodes_[static_cast<std::size_t>(j)];
      // Not zeroed either: every layer's backward writes all of each input's gradient.
      auto d =
          engine.allocate(source.layer->name() + ".out.grad", source.output_desc, kGradients, /*zero=*/false);
      if (!d) return d.status();
      fresh[k] = std::move(d).value();
      diff_in.push_back(&fresh[k]);
    }
    TENSORTIER_RETURN_IF_ERROR(
        node.layer->backward(engine, in, output_of(static_cast<int>(i)), node.diff, diff_in));
    for (std::size_t k = 0; k < node.inputs.size(); ++k) {
      const int j = node.inputs[k];
      if (j == kInput) continue;
      Node& source = nodes_[static_cast<std::size_t>(j)];
      if (source.diff.empty()) {
        source.diff = std::move(fresh[k]);
        continue;
      }
      // An output read by several nodes: its gradient is the sum of theirs.
      TENSORTIER_RETURN_IF_ERROR(
          engine.backend().accumulate(engine, source.layer->name() + ".grad_sum", source.diff, fresh[k]));
    }
    engine.release(node.output);
    engine.release(node.diff);
    if (sgd == nullptr) continue;
    for (Param* p : params) {
      TENSORTIER_RETURN_IF_ERROR(engine.backend().sgd_update(engine, *p, *sgd));
      if (!keep_gradients_) engine.release(p->grad);
    }
  }
  return Status::ok();
}

void Network::release_outputs(Engine& engine) {
  for (Node& node : nodes_) {
    engine.release(node.output);
    engine.release(node.diff);
  }
}

Result<StepResult> Network::run_step(Engine& engine, const Batch& batch, const SgdOptions* sgd) {
  Status s = forward(engine, batch.images, /*training=*/true);
  Result<StepResult> result = s.is_ok() ? loss(engine, batch, true) : Result<StepResult>(s);
  if (result) {
    if (Status b = backward(engine, sgd); !b.is_ok()) result = b;
  }
  release_outputs(engine);  // after an error too: nothing leaks into the next step
  return result;
}

Result<StepResult> Network::compute_gradients(Engine& engine, const Batch& batch) {
  return run_step(engine, batch, nullptr);
}

Result<StepResult> Network::train_step(Engine& engine, const Batch& batch, const SgdOptions& sgd) {
  return run_step(engine, batch, &sgd);
}

Result<StepResult> Network::evaluate(Engine& engine, const Batch& batch) {
  Status s = forward(engine, batch.images, /*training=*/false);
  Result<StepResult> result = s.is_ok() ? loss(engine, batch, false) : Result<StepResult>(s);
  release_outputs(engine);
  return result;
}

std::vector<Network::NodeSpec> Network::graph() const {
  std::vector<NodeSpec> out;
  out.reserve(nodes_.size());
  for (const Node& node : nodes_) out.push_back({&node.spec, node.inputs});
  return out;
}

std::vector<const Layer*> Network::layers() const {
  std::vector<const Layer*> out;
  out.reserve(nodes_.size());
  for (const Node& node : nodes_) out.push_back(node.layer.get());
  return out;
}

std::vector<std::pair<std::string, Param*>> Network::params() {
  std::vector<std::pair<std::string, Param*>> out;
  for (Node& node : nodes_) {
    const auto ps = node.layer->params();
    for (std::size_t k = 0; k < ps.size(); ++k) out.emplace_back(ps[k]->value.name(), ps[k]);
  }
  return out;
}

std::size_t Network::parameter_count() {
  std::size_t n = 0;
  for (auto& [name, p] : params()) n += p->plain.get_size() / sizeof(float);  // blocked layouts pad
  return n;
}

}  // namespace tensortier::dnn
