// The oneDNN backend's Linear layer: the fully connected layer (oneDNN inner product), bias optional.
#include "layers/onednn_layer.h"

#include <fmt/format.h>

namespace tensortier::dnn::onednn {
namespace {

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
  Status init_params(Engine& e, std::uint64_t seed) override {
    TENSORTIER_RETURN_IF_ERROR(uniform_init(e, weight_, fan_in_, seed, name_ + ".weight"));
    return bias_on_ ? uniform_init(e, bias_, fan_in_, seed, name_ + ".bias") : Status::ok();
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

}  // namespace

std::unique_ptr<Layer> make_linear(const std::string& name, const LinearSpec& spec) {
  return std::make_unique<Linear>(name, spec.out_features, spec.bias);
}

}  // namespace tensortier::dnn::onednn
