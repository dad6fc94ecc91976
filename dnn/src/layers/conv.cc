// The oneDNN backend's Conv layer: convolution: oneDNN's direct or Winograd algorithm (forward, backward
// data, backward weights), with bias.
#include "layers/onednn_layer.h"

#include <fmt/format.h>

namespace tensortier::dnn::onednn {
namespace {

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
  Status init_params(Engine& e, std::uint64_t seed) override {
    TENSORTIER_RETURN_IF_ERROR(uniform_init(e, weight_, fan_in_, seed, name_ + ".weight"));
    return o_.bias ? uniform_init(e, bias_, fan_in_, seed, name_ + ".bias") : Status::ok();
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

}  // namespace

std::unique_ptr<Layer> make_conv(const std::string& name, const ConvSpec& spec) {
  return std::make_unique<Conv>(name, spec);
}

}  // namespace tensortier::dnn::onednn
