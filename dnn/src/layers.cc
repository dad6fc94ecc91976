// oneDNN-backed layers (see layers.h).
#include "tensortier/dnn/layers.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string_view>
#include <variant>

#include <fmt/format.h>

namespace tensortier::dnn {
namespace {

using dnnl::algorithm;
using dnnl::prop_kind;
using memory = dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

// The scratchpads of a layer's forward, backward-data and backward-weights primitives.
template <typename Fwd, typename Data, typename Weights>
void scratchpads(const std::string& layer, const Fwd& fwd, const Data& data, const Weights& weights,
                 Scratchpad& fwd_pad, Scratchpad& data_pad, Scratchpad& weights_pad) {
  fwd_pad = {layer + ".fwd.scratchpad", fwd.scratchpad_desc()};
  data_pad = {layer + ".bwd_data.scratchpad", data.scratchpad_desc()};
  weights_pad = {layer + ".bwd_weights.scratchpad", weights.scratchpad_desc()};
}

// A layer's weight (in oneDNN's layout `w`, PyTorch's `w_plain`) and, where `b` is given, bias.
Status weight_and_bias(Engine& e, const std::string& layer, const memory::desc& w,
                       const memory::desc& w_plain, const memory::desc* b, Param& weight, Param& bias) {
  TENSORTIER_RETURN_IF_ERROR(make_param(e, layer + ".weight", w, w_plain, weight));
  return b != nullptr ? make_param(e, layer + ".bias", *b, *b, bias) : Status::ok();
}

// PyTorch's default init of conv and linear layers: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), drawn in
// the plain layout and reordered into the parameter's own.
void uniform_init(Engine& e, Param& p, std::size_t fan_in, std::uint64_t seed, const std::string& name) {
  const std::vector<float> values =
      uniform_init_values(p.plain.get_size() / sizeof(float), fan_in, seed, name);
  (void)e.reorder_now(p.plain, values.data(), p.value.desc(), p.value.address());
}

memory::desc any(const memory::dims& dims) {
  return {dims, dt::f32, tag::any};
}

// Wraps oneDNN's exceptions (from primitive-descriptor creation) as Status.
template <typename F>
Result<memory::desc> guarded(const std::string& layer, F&& body) {
  try {
    return body();
  } catch (const dnnl::error& e) {
    return internal_error(fmt::format("layer '{}': oneDNN cannot build it: {}", layer, e.what()));
  }
}

// The primitives a layer built for each input shape it was given (a batch size and its
// layouts), and which of them the batch in progress runs, so that going back to a shape seen
// before costs a lookup, not oneDNN's primitive creation (milliseconds a layer). An epoch's last
// partial batch is the second shape; there are rarely more, so a list searched in order is
// enough. Entries are never removed, so the current one stays valid.
template <typename Shape>
class Shapes {
 public:
  // Makes the shape built for these inputs the current one; false when none was built yet.
  bool use(const std::vector<memory::desc>& inputs) {
    for (auto& [key, shape] : all_) {
      if (key == inputs) {
        current_ = shape.get();
        return true;
      }
    }
    return false;
  }
  // Keeps a shape built for these inputs and makes it the current one.
  const Shape& add(const std::vector<memory::desc>& inputs, Shape shape) {
    all_.emplace_back(inputs, std::make_unique<Shape>(std::move(shape)));
    current_ = all_.back().second.get();
    return *current_;
  }
  bool empty() const { return current_ == nullptr; }
  // The current shape: valid once use() found one or add() kept one.
  const Shape* operator->() const { return current_; }

 private:
  std::vector<std::pair<std::vector<memory::desc>, std::unique_ptr<Shape>>> all_;
  const Shape* current_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
class Conv final : public Layer {
 public:
  Conv(std::string name, ConvSpec o) : Layer(std::move(name)), o_(o) {}
  // An input reordered into the convolution's layout: backward reads that copy instead.
  bool backward_reads_input(std::size_t /*k*/) const override {
    return shapes_.empty() || shapes_->src == shapes_->input;
  }

  Result<memory::desc> build(Engine& e, const std::vector<memory::desc>& inputs) override {
    if (Status s = need_inputs(name_, inputs, 1); !s.is_ok()) return s;
    if (shapes_.use(inputs)) return shapes_->dst;
    return guarded(name_, [&]() -> Result<memory::desc> {
      const memory::dims in = inputs[0].dims();
      if (in.size() != 4) return invalid_argument(fmt::format("conv '{}' needs a 4-D input", name_));
      const memory::dim k = o_.kernel, s = o_.stride, p = o_.padding;
      const memory::dim oh = (in[2] + 2 * p - k) / s + 1, ow = (in[3] + 2 * p - k) / s + 1;
      if (oh <= 0 || ow <= 0) return invalid_argument(fmt::format("conv '{}': input too small", name_));
      const bool first = weight_.value.empty();  // the first shape: the parameters are made for it
      if (!first && in[1] * k * k != static_cast<memory::dim>(fan_in_)) {
        return invalid_argument(fmt::format("conv '{}': an input of {} channels, built for {}", name_, in[1],
                                            static_cast<memory::dim>(fan_in_) / (k * k)));
      }
      // Layouts: first oneDNN's choice (format_tag::any: blocked on AVX-512, fastest); where it
      // has no optimized backward for that choice (convolutions of few input channels), plain
      // nchw/oihw, which its GEMM-based kernels serve. An input in another layout than the
      // convolution's is reordered first and its gradient reordered back; backward uses the
      // forward's layouts, so weights, gradients and momentum share one. A later shape (another
      // batch size) keeps the weights' layout of the first: the parameters exist once.
      Shape shape;
      shape.input = inputs[0];
      const memory::dims wdims{o_.out_channels, in[1], k, k};
      const memory::dims odims{in[0], o_.out_channels, oh, ow};
      const memory::desc b({o_.out_channels}, dt::f32, tag::x);
      const memory::desc weights = first ? any(wdims) : weight_.value.desc();
      const memory::dims strides{s, s}, pad{p, p};
      const auto attr = Engine::user_scratchpad();
      struct Pds {
        dnnl::convolution_forward::primitive_desc fwd;
        dnnl::convolution_backward_data::primitive_desc data;
        dnnl::convolution_backward_weights::primitive_desc weights;
        bool all_optimized() const {
          auto fast = [](const char* impl) { return std::string_view(impl).substr(0, 3) != "ref"; };
          return fast(fwd.impl_info_str()) && fast(data.impl_info_str()) && fast(weights.impl_info_str());
        }
      };
      // choose: the descs are format_tag::any, so backward data may pick its own layouts too.
      auto make = [&](algorithm algo, const memory::desc& src, const memory::desc& w, const memory::desc& dst,
                      bool choose) {
        auto fd = o_.bias ? dnnl::convolution_forward::desc(prop_kind::forward_training, algo, src, w, b, dst,
                                                            strides, pad, pad)
                          : dnnl::convolution_forward::desc(prop_kind::forward_training, algo, src, w, dst,
                                                            strides, pad, pad);
        const dnnl::convolution_forward::primitive_desc f(fd, attr, e.cpu());
        // Backward data may want the weights in another blocking (OIhw16o16i vs 16i16o): they
        // are then reordered for it each step, as frameworks do.
        const memory::desc data_w = choose ? any(wdims) : w;
        const memory::desc data_src = choose ? any(in) : src;
        const dnnl::convolution_backward_data::primitive_desc d(
            dnnl::convolution_backward_data::desc(algo, data_src, data_w, f.dst_desc(), strides, pad, pad),
            attr, e.cpu(), f);
        auto wd = o_.bias ? dnnl::convolution_backward_weights::desc(algo, f.src_desc(), f.weights_desc(), b,
                                                                     f.dst_desc(), strides, pad, pad)
                          : dnnl::convolution_backward_weights::desc(algo, f.src_desc(), f.weights_desc(),
                                                                     f.dst_desc(), strides, pad, pad);
        return Pds{f, d, dnnl::convolution_backward_weights::primitive_desc(wd, attr, e.cpu(), f)};
      };
      // Winograd where ConvAlgorithm::kAuto says it pays (engine.h), if oneDNN has optimized
      // Winograd kernels for all three passes of this shape; else direct.
      const bool winograd = e.conv_algorithm() == ConvAlgorithm::kAuto && k == 3 && s == 1 &&
                            in[1] % 16 == 0 && o_.out_channels % 16 == 0 && oh >= 8 && ow >= 8;
      std::optional<Pds> chosen;
      if (winograd) {
        try {
          chosen = make(algorithm::convolution_winograd, any(in), weights, any(odims), true);
          if (!chosen->all_optimized()) chosen.reset();
        } catch (const dnnl::error&) {  // no Winograd implementation for this shape or machine
          chosen.reset();
        }
      }
      if (!chosen) chosen = make(algorithm::convolution_direct, any(in), weights, any(odims), true);
      if (!chosen->all_optimized()) {
        // Plain layouts; a later shape whose weights are blocked takes what oneDNN has for them
        // (a reference kernel at worst: correct, slower, for the batches of that shape only).
        std::optional<Pds> plain_layouts;
        try {
          plain_layouts = make(algorithm::convolution_direct, memory::desc(in, dt::f32, tag::nchw),
                               first ? memory::desc(wdims, dt::f32, tag::oihw) : weights,
                               memory::desc(odims, dt::f32, tag::nchw), false);
        } catch (const dnnl::error&) {
          if (first) throw;
        }
        if (plain_layouts && (first || plain_layouts->all_optimized())) chosen = plain_layouts;
      }
      const Pds& pds = *chosen;
      shape.implementation = fmt::format("{} / {} / {}", pds.fwd.impl_info_str(), pds.data.impl_info_str(),
                                         pds.weights.impl_info_str());
      const auto& fpd = pds.fwd;
      const auto& bdpd = pds.data;
      const auto& bwpd = pds.weights;
      shape.src = fpd.src_desc();
      if (shape.src != shape.input)
        shape.to_src = dnnl::reorder(dnnl::reorder::primitive_desc(e.cpu(), shape.input, e.cpu(), shape.src));
      shape.diff_src = bdpd.diff_src_desc();
      if (shape.diff_src != shape.input) {
        shape.from_diff_src =
            dnnl::reorder(dnnl::reorder::primitive_desc(e.cpu(), shape.diff_src, e.cpu(), shape.input));
      }
      const memory::desc w = fpd.weights_desc();
      shape.data_weights = bdpd.weights_desc();
      if (shape.data_weights != w) {
        shape.to_data_weights =
            dnnl::reorder(dnnl::reorder::primitive_desc(e.cpu(), w, e.cpu(), shape.data_weights));
      }
      shape.dst = fpd.dst_desc();
      shape.fwd = dnnl::convolution_forward(fpd);
      shape.bwd_data = dnnl::convolution_backward_data(bdpd);
      shape.bwd_weights = dnnl::convolution_backward_weights(bwpd);
      scratchpads(name_, fpd, bdpd, bwpd, shape.pad_fwd, shape.pad_bwd_data, shape.pad_bwd_weights);
      if (first) {
        fan_in_ = static_cast<std::size_t>(in[1] * k * k);
        TENSORTIER_RETURN_IF_ERROR(weight_and_bias(e, name_, w, memory::desc(wdims, dt::f32, tag::oihw),
                                                   o_.bias ? &b : nullptr, weight_, bias_));
      }
      return shapes_.add(inputs, std::move(shape)).dst;
    });
  }

  Status forward(Engine& e, const std::vector<const Tensor*>& in, const Tensor& out, bool) override {
    const Tensor* src = in[0];
    if (shapes_->src != shapes_->input) {  // kept until backward, which reads the same layout
      auto copy = e.allocate(name_ + ".src", shapes_->src, kWorkspaces);
      if (!copy) return copy.status();
      src_copy_ = std::move(copy).value();
      TENSORTIER_RETURN_IF_ERROR(e.run(name_ + ".src_reorder", shapes_->to_src, {{DNNL_ARG_FROM, in[0]}},
                                       {{DNNL_ARG_TO, &src_copy_}}));
      src = &src_copy_;
    }
    std::vector<Arg> reads{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, &weight_.value}};
    if (o_.bias) reads.emplace_back(DNNL_ARG_BIAS, &bias_.value);
    return e.run(name_ + ".fwd", shapes_->fwd, reads, {{DNNL_ARG_DST, &out}}, shapes_->pad_fwd);
  }

  Status backward(Engine& e, const std::vector<const Tensor*>& in, const Tensor&, const Tensor& diff_out,
                  const std::vector<Tensor*>& diff_in) override {
    const Tensor* src = src_copy_.empty() ? in[0] : &src_copy_;
    std::vector<Arg> writes{{DNNL_ARG_DIFF_WEIGHTS, &weight_.grad}};
    if (o_.bias) writes.emplace_back(DNNL_ARG_DIFF_BIAS, &bias_.grad);
    TENSORTIER_RETURN_IF_ERROR(e.run(name_ + ".bwd_weights", shapes_->bwd_weights,
                                     {{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, &diff_out}}, writes,
                                     shapes_->pad_bwd_weights));
    e.release(src_copy_);
    if (diff_in[0] == nullptr) return Status::ok();  // the batch needs no gradient
    Tensor weights;  // the weights in backward data's layout, when it differs from theirs
    if (shapes_->data_weights != weight_.value.desc()) {
      auto t = e.allocate(name_ + ".weight.bwd_data", shapes_->data_weights, kGradients);
      if (!t) return t.status();
      weights = std::move(t).value();
      TENSORTIER_RETURN_IF_ERROR(e.run(name_ + ".weight_reorder", shapes_->to_data_weights,
                                       {{DNNL_ARG_FROM, &weight_.value}}, {{DNNL_ARG_TO, &weights}}));
    }
    Tensor diff_src;  // the input's gradient in backward data's layout, when the input's differs
    if (shapes_->diff_src != shapes_->input) {
      auto t = e.allocate(name_ + ".diff_src", shapes_->diff_src, kGradients);
      if (!t) return t.status();
      diff_src = std::move(t).value();
    }
    TENSORTIER_RETURN_IF_ERROR(e.run(
        name_ + ".bwd_data", shapes_->bwd_data,
        {{DNNL_ARG_WEIGHTS, weights.empty() ? &weight_.value : &weights}, {DNNL_ARG_DIFF_DST, &diff_out}},
        {{DNNL_ARG_DIFF_SRC, diff_src.empty() ? diff_in[0] : &diff_src}}, shapes_->pad_bwd_data));
    e.release(weights);
    if (diff_src.empty()) return Status::ok();
    return e.run(name_ + ".diff_src_reorder", shapes_->from_diff_src, {{DNNL_ARG_FROM, &diff_src}},
                 {{DNNL_ARG_TO, diff_in[0]}});
  }

  std::vector<Param*> params() override {
    if (o_.bias) return {&weight_, &bias_};
    return {&weight_};
  }
  void init_params(Engine& e, std::uint64_t seed) override {
    uniform_init(e, weight_, fan_in_, seed, name_ + ".weight");
    if (o_.bias) uniform_init(e, bias_, fan_in_, seed, name_ + ".bias");
  }
  std::string implementation() const override {
    return shapes_.empty() ? std::string() : shapes_->implementation;
  }

 private:
  struct Shape {
    std::string implementation;           // oneDNN's forward / backward data / backward weights kernels
    memory::desc input, src, dst;         // the input's layout, the convolution's, the output's
    memory::desc diff_src, data_weights;  // backward data's layouts of the input gradient, weights
    dnnl::reorder to_src, from_diff_src, to_data_weights;  // where those layouts differ
    dnnl::convolution_forward fwd;
    dnnl::convolution_backward_data bwd_data;
    dnnl::convolution_backward_weights bwd_weights;
    Scratchpad pad_fwd, pad_bwd_data, pad_bwd_weights;
  };
  ConvSpec o_;
  Shapes<Shape> shapes_;  // per input shape; shapes_-> is the batch in progress's
  Tensor src_copy_;       // the input in the convolution's layout, forward to backward
  std::size_t fan_in_ = 1;
  Param weight_, bias_;
};

// ---------------------------------------------------------------------------------------------
class BatchNorm final : public Layer {
 public:
  BatchNorm(std::string name, float epsilon, float momentum)
      : Layer(std::move(name)), epsilon_(epsilon), momentum_(momentum) {}
  // Fused, its output is relu(bn(x)) and its backward masks the gradient by its workspace (a bit
  // per element in blocked layouts, a byte in plain ones).
  bool fuse_relu() override {
    if (!shapes_.empty()) return false;  // built unfused already
    fused_relu_ = true;
    return true;
  }
  // The output again: the inference primitive (fused as forward is) given the batch's mean and
  // variance that forward computed and backward reads.
  bool can_recompute() const override { return true; }
  Status recompute(Engine& e, const std::vector<const Tensor*>& in, const Tensor& out) override {
    return e.run(name_ + ".recompute", shapes_->infer,
                 {{DNNL_ARG_SRC, in[0]},
                  {DNNL_ARG_SCALE, &scale_.value},
                  {DNNL_ARG_SHIFT, &shift_.value},
                  {DNNL_ARG_MEAN, &mean_},
                  {DNNL_ARG_VARIANCE, &variance_}},
                 {{DNNL_ARG_DST, &out}}, shapes_->pad_infer);
  }

  Result<memory::desc> build(Engine& e, const std::vector<memory::desc>& inputs) override {
    if (Status s = need_inputs(name_, inputs, 1); !s.is_ok()) return s;
    if (shapes_.use(inputs)) return shapes_->data;
    return guarded(name_, [&]() -> Result<memory::desc> {
      Shape shape;
      shape.data = inputs[0];  // normalizes in its input's layout
      const memory::dims d = shape.data.dims();
      if (!scale_.value.empty() && static_cast<std::size_t>(d[1]) != scale_.value.elements()) {
        return invalid_argument(fmt::format("batch norm '{}': an input of {} channels, built for {}", name_,
                                            d[1], scale_.value.elements()));
      }
      shape.count = static_cast<std::size_t>(d[0] * (d.size() == 4 ? d[2] * d[3] : 1));
      auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
      if (fused_relu_) flags = flags | dnnl::normalization_flags::fuse_norm_relu;
      const auto attr = Engine::user_scratchpad();
      const dnnl::batch_normalization_forward::primitive_desc train(
          dnnl::batch_normalization_forward::desc(prop_kind::forward_training, shape.data, epsilon_, flags),
          attr, e.cpu());
      const dnnl::batch_normalization_forward::primitive_desc infer(
          dnnl::batch_normalization_forward::desc(prop_kind::forward_inference, shape.data, epsilon_,
                                                  flags | dnnl::normalization_flags::use_global_stats),
          attr, e.cpu());
      const dnnl::batch_normalization_backward::primitive_desc bwd(
          dnnl::batch_normalization_backward::desc(prop_kind::backward, shape.data, shape.data, epsilon_,
                                                   flags),
          attr, e.cpu(), train);
      shape.train = dnnl::batch_normalization_forward(train);
      shape.infer = dnnl::batch_normalization_forward(infer);
      shape.bwd = dnnl::batch_normalization_backward(bwd);
      shape.pad_train = {name_ + ".fwd.scratchpad", train.scratchpad_desc()};
      shape.pad_infer = {name_ + ".infer.scratchpad", infer.scratchpad_desc()};
      shape.pad_bwd = {name_ + ".bwd.scratchpad", bwd.scratchpad_desc()};
      shape.workspace = train.workspace_desc();
      if (scale_.value.empty()) {  // the first shape: parameters and running statistics, made once
        stats_ = train.mean_desc();
        const memory::desc c({d[1]}, dt::f32, tag::x);
        TENSORTIER_RETURN_IF_ERROR(make_param(e, name_ + ".weight", c, c, scale_));
        TENSORTIER_RETURN_IF_ERROR(make_param(e, name_ + ".bias", c, c, shift_));
        for (auto [t, suffix] :
             {std::pair{&running_mean_, ".running_mean"}, std::pair{&running_var_, ".running_var"}}) {
          auto r = e.allocate(name_ + suffix, stats_, kParams);
          if (!r) return r.status();
          *t = std::move(r).value();
        }
        init_params(e, 0);
      }
      return shapes_.add(inputs, std::move(shape)).data;
    });
  }

  Status forward(Engine& e, const std::vector<const Tensor*>& in, const Tensor& out, bool training) override {
    if (!training) {
      return e.run(name_ + ".fwd", shapes_->infer,
                   {{DNNL_ARG_SRC, in[0]},
                    {DNNL_ARG_SCALE, &scale_.value},
                    {DNNL_ARG_SHIFT, &shift_.value},
                    {DNNL_ARG_MEAN, &running_mean_},
                    {DNNL_ARG_VARIANCE, &running_var_}},
                   {{DNNL_ARG_DST, &out}}, shapes_->pad_infer);
    }
    for (auto [t, suffix] : {std::pair{&mean_, ".mean"}, std::pair{&variance_, ".variance"}}) {
      auto r = e.allocate(name_ + suffix, stats_, kWorkspaces);
      if (!r) return r.status();
      *t = std::move(r).value();
    }
    std::vector<Arg> writes{{DNNL_ARG_DST, &out}, {DNNL_ARG_MEAN, &mean_}, {DNNL_ARG_VARIANCE, &variance_}};
    if (shapes_->workspace.get_size() != 0) {  // fused with its ReLU: the mask for backward
      auto w = e.allocate(name_ + ".workspace", shapes_->workspace, kWorkspaces, /*zero=*/false);
      if (!w) return w.status();
      workspace_ = std::move(w).value();
      writes.emplace_back(DNNL_ARG_WORKSPACE, &workspace_);
    }
    TENSORTIER_RETURN_IF_ERROR(
        e.run(name_ + ".fwd", shapes_->train,
              {{DNNL_ARG_SRC, in[0]}, {DNNL_ARG_SCALE, &scale_.value}, {DNNL_ARG_SHIFT, &shift_.value}},
              writes, shapes_->pad_train));
    // Running statistics as PyTorch keeps them (unbiased variance); oneDNN has no primitive for
    // this update, and it is C floats.
    const std::size_t count = shapes_->count;
    return e.host_layer(name_ + ".running_stats", {&mean_, &variance_}, {&running_mean_, &running_var_}, [&] {
      const float unbias = count > 1 ? static_cast<float>(count) / static_cast<float>(count - 1) : 1.0F;
      for (std::size_t c = 0; c < mean_.elements(); ++c) {
        running_mean_.data()[c] = (1 - momentum_) * running_mean_.data()[c] + momentum_ * mean_.data()[c];
        running_var_.data()[c] =
            (1 - momentum_) * running_var_.data()[c] + momentum_ * variance_.data()[c] * unbias;
      }
    });
  }

  Status backward(Engine& e, const std::vector<const Tensor*>& in, const Tensor&, const Tensor& diff_out,
                  const std::vector<Tensor*>& diff_in) override {
    Tensor scratch_diff;  // batch norm always computes diff_src; a first layer discards it
    const Tensor* diff_src = diff_in[0];
    if (diff_src == nullptr) {
      auto t = e.allocate(name_ + ".diff_src", shapes_->data, kGradients);
      if (!t) return t.status();
      scratch_diff = std::move(t).value();
      diff_src = &scratch_diff;
    }
    std::vector<Arg> reads{
        {DNNL_ARG_SRC, in[0]},           {DNNL_ARG_MEAN, &mean_},
        {DNNL_ARG_VARIANCE, &variance_}, {DNNL_ARG_DIFF_DST, &diff_out},
        {DNNL_ARG_SCALE, &scale_.value}, {DNNL_ARG_SHIFT, &shift_.value}};  // 2.6 asks for shift too
    if (!workspace_.empty()) reads.emplace_back(DNNL_ARG_WORKSPACE, &workspace_);
    TENSORTIER_RETURN_IF_ERROR(e.run(name_ + ".bwd", shapes_->bwd, reads,
                                     {{DNNL_ARG_DIFF_SRC, diff_src},
                                      {DNNL_ARG_DIFF_SCALE, &scale_.grad},
                                      {DNNL_ARG_DIFF_SHIFT, &shift_.grad}},
                                     shapes_->pad_bwd));
    e.release(mean_);
    e.release(variance_);
    e.release(workspace_);
    return Status::ok();
  }

  std::vector<Param*> params() override { return {&scale_, &shift_}; }
  void init_params(Engine&, std::uint64_t) override {
    for (std::size_t c = 0; c < scale_.value.elements(); ++c) {
      scale_.value.data()[c] = 1;
      shift_.value.data()[c] = 0;
      running_mean_.data()[c] = 0;
      running_var_.data()[c] = 1;
    }
  }

 private:
  struct Shape {
    memory::desc data;       // the input's layout, which the output and gradients keep
    memory::desc workspace;  // fused with a ReLU: its mask (none: 0 bytes)
    std::size_t count = 1;   // values per channel: N x H x W
    dnnl::batch_normalization_forward train, infer;
    dnnl::batch_normalization_backward bwd;
    Scratchpad pad_train, pad_infer, pad_bwd;
  };
  float epsilon_, momentum_;
  bool fused_relu_ = false;
  Shapes<Shape> shapes_;  // per input shape; shapes_-> is the batch in progress's
  memory::desc stats_;    // mean and variance: one value per channel, whatever the batch
  Param scale_, shift_;
  Tensor running_mean_, running_var_, mean_, variance_, workspace_;
};

// ---------------------------------------------------------------------------------------------
class Relu final : public Layer {
 public:
  using Layer::Layer;
  bool can_run_in_place() const override { return true; }
  void set_in_place(bool on) override { in_place_ = on; }
  bool is_relu() const override { return true; }
  bool backward_reads_input(std::size_t /*k*/) const override { return !in_place_; }
  bool backward_reads_output() const override { return in_place_; }
  Result<memory::desc> build(Engine& e, const std::vector<memory::desc>& inputs) override {
    if (Status s = need_inputs(name_, inputs, 1); !s.is_ok()) return s;
    if (shapes_.use(inputs)) return inputs[0];
    return guarded(name_, [&]() -> Result<memory::desc> {
      const memory::desc d = inputs[0];
      // In place the input is gone by backward: the gradient is computed from the output
      // (output > 0 exactly where input > 0, so the result is the same to the bit).
      const algorithm algo = in_place_ ? algorithm::eltwise_relu_use_dst_for_bwd : algorithm::eltwise_relu;
      const dnnl::eltwise_forward::primitive_desc f(
          dnnl::eltwise_forward::desc(prop_kind::forward_training, algo, d, 0.F, 0.F), e.cpu());
      const dnnl::eltwise_backward::primitive_desc b(dnnl::eltwise_backward::desc(algo, d, d, 0.F, 0.F),
                                                     e.cpu(), f);
      shapes_.add(inputs, Shape{dnnl::eltwise_forward(f), dnnl::eltwise_backward(b)});
      return d;
    });
  }
  Status forward(Engine& e, const std::vector<const Tensor*>& in, const Tensor& out, bool) override {
    // In place, `out` is in[0]: one object, declared as read and written.
    return e.run(name_ + ".fwd", shapes_->fwd, {{DNNL_ARG_SRC, in[0]}}, {{DNNL_ARG_DST, &out}});
  }
  Status backward(Engine& e, const std::vector<const Tensor*>& in, const Tensor& out, const Tensor& diff_out,
                  const std::vector<Tensor*>& diff_in) override {
    if (diff_in[0] == nullptr) return Status::ok();
    const Arg data = in_place_ ? Arg{DNNL_ARG_DST, &out} : Arg{DNNL_ARG_SRC, in[0]};
    return e.run(name_ + ".bwd", shapes_->bwd, {data, {DNNL_ARG_DIFF_DST, &diff_out}},
                 {{DNNL_ARG_DIFF_SRC, diff_in[0]}});
  }

 private:
  struct Shape {
    dnnl::eltwise_forward fwd;
    dnnl::eltwise_backward bwd;
  };
  bool in_place_ = false;
  Shapes<Shape> shapes_;  // per input shape; shapes_-> is the batch in progress's
};

// ---------------------------------------------------------------------------------------------
class Pool final : public Layer {
 public:
  Pool(std::string name, PoolKind kind, int kernel, int stride, int padding, bool global)
      : Layer(std::move(name)),
        kind_(kind),
        kernel_(kernel),
        stride_(stride),
        padding_(padding),
        global_(global) {}
  // Max pooling's backward reads its workspace, average pooling's nothing of forward's.
  bool backward_reads_input(std::size_t /*k*/) const override { return false; }

  Result<memory::desc> build(Engine& e, const std::vector<memory::desc>& inputs) override {
    if (Status s = need_inputs(name_, inputs, 1); !s.is_ok()) return s;
    if (shapes_.use(inputs)) return shapes_->dst;
    return guarded(name_, [&]() -> Result<memory::desc> {
      const memory::dims in = inputs[0].dims();
      if (in.size() != 4) return invalid_argument(fmt::format("pool '{}' needs a 4-D input", name_));
      const memory::dims kernel = global_ ? memory::dims{in[2], in[3]} : memory::dims{kernel_, kernel_};
      const memory::dims strides = global_ ? memory::dims{1, 1} : memory::dims{stride_, stride_};
      const memory::dims pad = global_ ? memory::dims{0, 0} : memory::dims{padding_, padding_};
      const memory::dim oh = (in[2] + 2 * pad[0] - kernel[0]) / strides[0] + 1;
      const memory::dim ow = (in[3] + 2 * pad[1] - kernel[1]) / strides[1] + 1;
      if (oh <= 0 || ow <= 0) return invalid_argument(fmt::format("pool '{}': input too small", name_));
      const memory::desc src = inputs[0];
      const algorithm algo =
          kind_ == PoolKind::kMax ? algorithm::pooling_max : algorithm::pooling_avg_include_padding;
      const memory::dims dilation{0, 0};
      const auto attr = Engine::user_scratchpad();
      const dnnl::pooling_v2_forward::primitive_desc train(
          dnnl::pooling_v2_forward::desc(prop_kind::forward_training, algo, src, any({in[0], in[1], oh, ow}),
                                         strides, kernel, dilation, pad, pad),
          attr, e.cpu());
      Shape shape;
      shape.dst = train.dst_desc();
      const dnnl::pooling_v2_forward::primitive_desc infer(
          dnnl::pooling_v2_forward::desc(prop_kind::forward_inference, algo, src, shape.dst, strides, kernel,
                                         dilation, pad, pad),
          attr, e.cpu());
      const dnnl::pooling_v2_backward::primitive_desc bwd(
          dnnl::pooling_v2_backward::desc(algo, src, shape.dst, strides, kernel, dilation, pad, pad), attr,
          e.cpu(), train);
      shape.train = dnnl::pooling_v2_forward(train);
      shape.infer = dnnl::pooling_v2_forward(infer);
      shape.bwd = dnnl::pooling_v2_backward(bwd);
      shape.workspace = train.workspace_desc();
      shape.pad_train = {name_ + ".fwd.scratchpad", train.scratchpad_desc()};
      shape.pad_infer = {name_ + ".infer.scratchpad", infer.scratchpad_desc()};
      shape.pad_bwd = {name_ + ".bwd.scratchpad", bwd.scratchpad_desc()};
      return shapes_.add(inputs, std::move(shape)).dst;
    });
  }

  Status forward(Engine& e, const std::vector<const Tensor*>& in, const Tensor& out, bool training) override {
    if (!training) {
      return e.run(name_ + ".fwd", shapes_->infer, {{DNNL_ARG_SRC, in[0]}}, {{DNNL_ARG_DST, &out}},
                   shapes_->pad_infer);
    }
    std::vector<Arg> writes{{DNNL_ARG_DST, &out}};
    if (shapes_->workspace.get_size() != 0) {
      auto w = e.allocate(name_ + ".workspace", shapes_->workspace, kWorkspaces);
      if (!w) return w.status();
      workspace_ = std::move(w).value();
      writes.emplace_back(DNNL_ARG_WORKSPACE, &workspace_);
    }
    return e.run(name_ + ".fwd", shapes_->train, {{DNNL_ARG_SRC, in[0]}}, writes, shapes_->pad_train);
  }

  Status backward(Engine& e, const std::vector<const Tensor*>&, const Tensor&, const Tensor& diff_out,
                  const std::vector<Tensor*>& diff_in) override {
    if (diff_in[0] != nullptr) {
      std::vector<Arg> reads{{DNNL_ARG_DIFF_DST, &diff_out}};
      if (!workspace_.empty()) reads.emplace_back(DNNL_ARG_WORKSPACE, &workspace_);
      TENSORTIER_RETURN_IF_ERROR(
          e.run(name_ + ".bwd", shapes_->bwd, reads, {{DNNL_ARG_DIFF_SRC, diff_in[0]}}, shapes_->pad_bwd));
    }
    e.release(workspace_);
    return Status::ok();
  }

 private:
  struct Shape {
    memory::desc dst, workspace;  // the output's layout; max pooling's workspace (none: 0 bytes)
    dnnl::pooling_v2_forward train, infer;
    dnnl::pooling_v2_backward bwd;
    Scratchpad pad_train, pad_infer, pad_bwd;
  };
  PoolKind kind_;
  int kernel_, stride_, padding_;
  bool global_;
  Shapes<Shape> shapes_;  // per input shape; shapes_-> is the batch in progress's
  Tensor workspace_;
};

// ---------------------------------------------------------------------------------------------
class Linear final : public Layer {
 public:
  Linear(std::string name, int out, bool bias) : Layer(std::move(name)), out_(out), bias_on_(bias) {}

  Result<memory::desc> build(Engine& e, const std::vector<memory::desc>& inputs) override {
    if (Status s = need_inputs(name_, inputs, 1); !s.is_ok()) return s;
    if (shapes_.use(inputs)) return shapes_->dst;
    return guarded(name_, [&]() -> Result<memory::desc> {
      const memory::dims in = inputs[0].dims();
      const memory::desc src = inputs[0];
      memory::dims wd{out_};
      wd.insert(wd.end(), in.begin() + 1, in.end());
      const bool first = weight_.value.empty();  // the first shape: the parameters are made for it
      if (!first && wd != weight_.value.dims()) {
        return invalid_argument(
            fmt::format("linear '{}': an input of another shape than the one it was built for", name_));
      }
      const memory::desc w_plain(wd, dt::f32, in.size() == 4 ? tag::oihw : tag::oi);
      const memory::desc b({out_}, dt::f32, tag::x);
      Shape shape;
      shape.dst = plain_desc({in[0], out_});
      const auto attr = Engine::user_scratchpad();
      // A later shape (another batch size) keeps the weights' layout of the first.
      const memory::desc weights = first ? any(wd) : weight_.value.desc();
      auto fd =
          bias_on_
              ? dnnl::inner_product_forward::desc(prop_kind::forward_training, src, weights, b, shape.dst)
              : dnnl::inner_product_forward::desc(prop_kind::forward_training, src, weights, shape.dst);
      const dnnl::inner_product_forward::primitive_desc fpd(fd, attr, e.cpu());
      const memory::desc w = fpd.weights_desc();
      const dnnl::inner_product_backward_data::primitive_desc bdpd(
          dnnl::inner_product_backward_data::desc(src, w, shape.dst), attr, e.cpu(), fpd);
      auto bwd = bias_on_ ? dnnl::inner_product_backward_weights::desc(src, w, b, shape.dst)
                          : dnnl::inner_product_backward_weights::desc(src, w, shape.dst);
      const dnnl::inner_product_backward_weights::primitive_desc bwpd(bwd, attr, e.cpu(), fpd);
      shape.fwd = dnnl::inner_product_forward(fpd);
      shape.bwd_data = dnnl::inner_product_backward_data(bdpd);
      shape.bwd_weights = dnnl::inner_product_backward_weights(bwpd);
      scratchpads(name_, fpd, bdpd, bwpd, shape.pad_fwd, shape.pad_bwd_data, shape.pad_bwd_weights);
      if (first) {
        fan_in_ = 1;
        for (std::size_t i = 1; i < in.size(); ++i) fan_in_ *= static_cast<std::size_t>(in[i]);
        TENSORTIER_RETURN_IF_ERROR(
            weight_and_bias(e, name_, w, w_plain, bias_on_ ? &b : nullptr, weight_, bias_));
      }
      return shapes_.add(inputs, std::move(shape)).dst;
    });
  }

  Status forward(Engine& e, const std::vector<const Tensor*>& in, const Tensor& out, bool) override {
    std::vector<Arg> reads{{DNNL_ARG_SRC, in[0]}, {DNNL_ARG_WEIGHTS, &weight_.value}};
    if (bias_on_) reads.emplace_back(DNNL_ARG_BIAS, &bias_.value);
    return e.run(name_ + ".fwd", shapes_->fwd, reads, {{DNNL_ARG_DST, &out}}, shapes_->pad_fwd);
  }

  Status backward(Engine& e, const std::vector<const Tensor*>& in, const Tensor&, const Tensor& diff_out,
                  const std::vector<Tensor*>& diff_in) override {
    std::vector<Arg> writes{{DNNL_ARG_DIFF_WEIGHTS, &weight_.grad}};
    if (bias_on_) writes.emplace_back(DNNL_ARG_DIFF_BIAS, &bias_.grad);
    TENSORTIER_RETURN_IF_ERROR(e.run(name_ + ".bwd_weights", shapes_->bwd_weights,
                                     {{DNNL_ARG_SRC, in[0]}, {DNNL_ARG_DIFF_DST, &diff_out}}, writes,
                                     shapes_->pad_bwd_weights));
    if (diff_in[0] == nullptr) return Status::ok();
    return e.run(name_ + ".bwd_data", shapes_->bwd_data,
                 {{DNNL_ARG_WEIGHTS, &weight_.value}, {DNNL_ARG_DIFF_DST, &diff_out}},
                 {{DNNL_ARG_DIFF_SRC, diff_in[0]}}, shapes_->pad_bwd_data);
  }

  std::vector<Param*> params() override {
    if (bias_on_) return {&weight_, &bias_};
    return {&weight_};
  }
  void init_params(Engine& e, std::uint64_t seed) override {
    uniform_init(e, weight_, fan_in_, seed, name_ + ".weight");
    if (bias_on_) uniform_init(e, bias_, fan_in_, seed, name_ + ".bias");
  }

 private:
  struct Shape {
    memory::desc dst;  // N x out, plain
    dnnl::inner_product_forward fwd;
    dnnl::inner_product_backward_data bwd_data;
    dnnl::inner_product_backward_weights bwd_weights;
    Scratchpad pad_fwd, pad_bwd_data, pad_bwd_weights;
  };
  int out_;
  bool bias_on_;
  std::size_t fan_in_ = 1;
  Shapes<Shape> shapes_;  // per input shape; shapes_-> is the batch in progress's
  Param weight_, bias_;
};

// ---------------------------------------------------------------------------------------------
class Add final : public Layer {
 public:
  using Layer::Layer;
  bool can_run_in_place() const override { return true; }  // forward() is then given in[0] as out
  bool backward_reads_input(std::size_t /*k*/) const override { return false; }
  Result<memory::desc> build(Engine& e, const std::vector<memory::desc>& inputs) override {
    if (Status s = need_inputs(name_, inputs, 2); !s.is_ok()) return s;
    if (inputs[0].dims() != inputs[1].dims()) {
      return invalid_argument(fmt::format("add '{}': the two inputs differ in shape", name_));
    }
    if (shapes_.use(inputs)) return shapes_->first;
    return guarded(name_, [&]() -> Result<memory::desc> {
      // The sum takes the first input's layout; a second input in another layout (its
      // convolution chose differently) is reordered into it, and its gradient back out of it.
      Shape shape;
      shape.first = inputs[0];
      shape.second = inputs[1];
      if (shape.first != shape.second) {
        shape.to_first =
            dnnl::reorder(dnnl::reorder::primitive_desc(e.cpu(), shape.second, e.cpu(), shape.first));
        shape.to_second =
            dnnl::reorder(dnnl::reorder::primitive_desc(e.cpu(), shape.first, e.cpu(), shape.second));
      }
      shape.fwd = dnnl::binary(dnnl::binary::primitive_desc(
          dnnl::binary::desc(algorithm::binary_add, shape.first, shape.first, shape.first), e.cpu()));
      return shapes_.add(inputs, std::move(shape)).first;
    });
  }
  Status forward(Engine& e, const std::vector<const Tensor*>& in, const Tensor& out, bool) override {
    Tensor converted;
    const Tensor* second = in[1];
    if (shapes_->first != shapes_->second) {
      auto t = e.allocate(name_ + ".src1", shapes_->first, kGradients);
      if (!t) return t.status();
      converted = std::move(t).value();
      TENSORTIER_RETURN_IF_ERROR(e.run(name_ + ".src1_reorder", shapes_->to_first, {{DNNL_ARG_FROM, in[1]}},
                                       {{DNNL_ARG_TO, &converted}}));
      second = &converted;
    }
    // In place, `out` is in[0]: one object, read and written (oneDNN's binary allows dst == src0).
    return e.run(name_ + ".fwd", shapes_->fwd, {{DNNL_ARG_SRC_0, in[0]}, {DNNL_ARG_SRC_1, second}},
                 {{DNNL_ARG_DST, &out}});
  }
  // d(a+b)/da = d(a+b)/db = 1: both inputs get the output's gradient: a copy where the layouts
  // agree (a memcpy needs no primitive), a reorder where they do not.
  Status backward(Engine& e, const std::vector<const Tensor*>&, const Tensor&, const Tensor& diff_out,
                  const std::vector<Tensor*>& diff_in) override {
    const bool same = shapes_->first == shapes_->second;
    std::vector<const Tensor*> copies;
    if (diff_in[0] != nullptr) copies.push_back(diff_in[0]);
    if (diff_in[1] != nullptr && same) copies.push_back(diff_in[1]);
    if (!copies.empty()) {
      TENSORTIER_RETURN_IF_ERROR(e.host_layer(name_ + ".bwd", {&diff_out}, copies, [&] {
        for (const Tensor* d : copies) std::memcpy(d->address(), diff_out.address(), diff_out.bytes());
      }));
    }
    if (diff_in[1] == nullptr || same) return Status::ok();
    return e.run(name_ + ".bwd_src1_reorder", shapes_->to_second, {{DNNL_ARG_FROM, &diff_out}},
                 {{DNNL_ARG_TO, diff_in[1]}});
  }

 private:
  struct Shape {
    memory::desc first, second;         // the inputs' layouts
    dnnl::reorder to_first, to_second;  // between them, where they differ
    dnnl::binary fwd;
  };
  Shapes<Shape> shapes_;  // per input shape; shapes_-> is the batch in progress's
};

}  // namespace

std::unique_ptr<Layer> make_onednn_layer(const LayerSpec& spec) {
  struct Make {
    const std::string& name;
    std::unique_ptr<Layer> operator()(const ConvSpec& c) const { return std::make_unique<Conv>(name, c); }
    std::unique_ptr<Layer> operator()(const BatchNormSpec& b) const {
      return std::make_unique<BatchNorm>(name, b.epsilon, b.momentum);
    }
    std::unique_ptr<Layer> operator()(const ReluSpec&) const { return std::make_unique<Relu>(name); }
    std::unique_ptr<Layer> operator()(const PoolSpec& p) const {
      return std::make_unique<Pool>(name, p.kind, p.kernel, p.stride, p.padding, p.global);
    }
    std::unique_ptr<Layer> operator()(const LinearSpec& l) const {
      return std::make_unique<Linear>(name, l.out_features, l.bias);
    }
    std::unique_ptr<Layer> operator()(const AddSpec&) const { return std::make_unique<Add>(name); }
  };
  return std::visit(Make{spec.name}, spec.kind);
}

memory::desc plain_desc(const memory::dims& dims) {
  const tag t = dims.size() == 4 ? tag::nchw : dims.size() == 2 ? tag::nc : tag::x;
  return {dims, dt::f32, t};
}

Status make_param(Engine& e, const std::string& name, const memory::desc& desc, const memory::desc& plain,
                  Param& p, bool decay) {
  auto value = e.allocate(name, desc, kParams);
  if (!value) return value.status();
  auto momentum = e.allocate(name + ".momentum", desc, kOptimizerState);
  if (!momentum) return momentum.status();
  p.value = std::move(value).value();
  p.momentum = std::move(momentum).value();
  p.plain = plain;
  p.decay = decay;
  return Status::ok();
}

Status need_inputs(const std::string& layer, const std::vector<memory::desc>& inputs, std::size_t n) {
  if (inputs.size() != n) {
    return invalid_argument(fmt::format("layer '{}' takes {} input(s), got {}", layer, n, inputs.size()));
  }
  return Status::ok();
}

std::vector<float> uniform_init_values(std::size_t count, std::size_t fan_in, std::uint64_t seed,
                                       const std::string& name) {
  std::mt19937_64 rng(seed ^ std::hash<std::string>{}(name));
  const float bound = 1.0F / std::sqrt(static_cast<float>(fan_in));
  std::uniform_real_distribution<float> dist(-bound, bound);
  std::vector<float> values(count);
  for (float& v : values) v = dist(rng);
  return values;
}

}  // namespace tensortier::dnn
