// The oneDNN backend's BatchNorm layer: batch normalization with running statistics, fused with the ReLU that
// alone reads it where the network says so.
#include "layers/onednn_layer.h"

#include <fmt/format.h>

namespace tensortier::dnn::onednn {
namespace {

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
        TENSORTIER_RETURN_IF_ERROR(init_params(e, 0));
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
  Status init_params(Engine&, std::uint64_t) override {
    for (std::size_t c = 0; c < scale_.value.elements(); ++c) {
      scale_.value.data()[c] = 1;
      shift_.value.data()[c] = 0;
      running_mean_.data()[c] = 0;
      running_var_.data()[c] = 1;
    }
    return Status::ok();
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

}  // namespace

std::unique_ptr<Layer> make_batch_norm(const std::string& name, const BatchNormSpec& spec) {
  return std::make_unique<BatchNorm>(name, spec.epsilon, spec.momentum);
}

}  // namespace tensortier::dnn::onednn
