// The cuDNN backend's batch norm (spatial, as BatchNorm2d): cudnnBatchNormalizationForwardTraining
// keeps the batch's mean and inverse deviation for backward (this layer's tensors, kWorkspaces,
// released at the end of backward) and updates the running statistics as PyTorch does (momentum,
// unbiased variance); ForwardInference when not training; Backward gives the input's, scale's
// and shift's gradients.
#include "cudnn_layer.h"

namespace tensortier::dnn::cudnn {
namespace {

class BatchNormLayer final : public Layer {
 public:
  BatchNormLayer(const LayerSpec& spec, const BatchNormSpec& bn, Context& context)
      : Layer(spec.name), spec_(bn), context_(context) {}

  Result<dnnl::memory::desc> build(Engine& e, const std::vector<dnnl::memory::desc>& inputs) override {
    TENSORTIER_RETURN_IF_ERROR(need_inputs(name_, inputs, 1));
    const Dims in = inputs[0].dims();
    auto d = batch_norm_descriptors(in);
    if (!d) return d.status();
    d_ = std::move(d).value();
    if (scale_.value.empty()) {
      const std::int64_t c = in[1];
      TENSORTIER_RETURN_IF_ERROR(plain_param(e, name_ + ".weight", {c}, scale_));
      TENSORTIER_RETURN_IF_ERROR(plain_param(e, name_ + ".bias", {c}, shift_));
      for (auto [t, suffix] :
           {std::pair{&running_mean_, ".running_mean"}, std::pair{&running_var_, ".running_var"}}) {
        auto r = e.allocate(name_ + suffix, plain_desc({c}), kParams);
        if (!r) return r.status();
        *t = std::move(r).value();
      }
      const auto channels = static_cast<std::size_t>(c);
      TENSORTIER_RETURN_IF_ERROR(set_param(e, scale_, std::vector<float>(channels, 1.0F)));
      TENSORTIER_RETURN_IF_ERROR(e.write_from_host({&running_var_}, [&](const std::vector<void*>& bytes) {
        std::fill_n(static_cast<float*>(bytes[0]), channels, 1.0F);
      }));
    }
    return inputs[0];
  }

  Status forward(Engine& e, const std::vector<const Tensor*>& in, const Tensor& out, bool training) override {
    const float one = 1, zero = 0;
    const double epsilon = spec_.epsilon;
    if (!training) {
      return device_layer(
          e, name_, {in[0], &scale_.value, &shift_.value, &running_mean_, &running_var_}, {&out},
          [&]() -> Status {
            TT_CUDNN(cudnnBatchNormalizationForwardInference(
                context_.cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, d_.x.get(), in[0]->address(),
                d_.x.get(), out.address(), d_.scale_bias.get(), scale_.value.address(),
                shift_.value.address(), running_mean_.address(), running_var_.address(), epsilon));
            return Status::ok();
          });
    }
    for (auto [t, suffix] :
         {std::pair{&saved_mean_, ".saved_mean"}, std::pair{&saved_inv_std_, ".saved_inv_std"}}) {
      e.release(*t);
      auto r = e.allocate(name_ + suffix, running_mean_.desc(), kWorkspaces, /*zero=*/false);
      if (!r) return r.status();
      *t = std::move(r).value();
    }
    return device_layer(
        e, name_, {in[0], &scale_.value, &shift_.value, &running_mean_, &running_var_},
        {&out, &running_mean_, &running_var_, &saved_mean_, &saved_inv_std_}, [&]() -> Status {
          TT_CUDNN(cudnnBatchNormalizationForwardTraining(
              context_.cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, d_.x.get(), in[0]->address(), d_.x.get(),
              out.address(), d_.scale_bias.get(), scale_.value.address(), shift_.value.address(),
              spec_.momentum, running_mean_.address(), running_var_.address(), epsilon, saved_mean_.address(),
              saved_inv_std_.address()));
          return Status::ok();
        });
  }

  Status backward(Engine& e, const std::vector<const Tensor*>& in, const Tensor& /*out*/,
                  const Tensor& diff_out, const std::vector<Tensor*>& diff_in) override {
    Tensor scratch;  // the input's gradient where nobody wants it: cuDNN writes it all the same
    const Tensor* diff_src = diff_in[0];
    if (diff_src == nullptr) {
      auto t = e.allocate(name_ + ".diff_src", diff_out.desc(), kGradients, /*zero=*/false);
      if (!t) return t.status();
      scratch = std::move(t).value();
      diff_src = &scratch;
    }
    const float one = 1, zero = 0;
    Status status = device_layer(
        e, name_ + ".bwd", {in[0], &diff_out, &scale_.value, &saved_mean_, &saved_inv_std_},
        {diff_src, &scale_.grad, &shift_.grad}, [&]() -> Status {
          TT_CUDNN(cudnnBatchNormalizationBackward(
              context_.cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, d_.x.get(), in[0]->address(),
              d_.x.get(), diff_out.address(), d_.x.get(), diff_src->address(), d_.scale_bias.get(),
              scale_.value.address(), scale_.grad.address(), shift_.grad.address(), spec_.epsilon,
              saved_mean_.address(), saved_inv_std_.address()));
          return Status::ok();
        });
    e.release(scratch);
    e.release(saved_mean_);
    e.release(saved_inv_std_);
    return status;
  }

  bool backward_reads_input(std::size_t /*k*/) const override { return true; }
  std::vector<Param*> params() override { return {&scale_, &shift_}; }

 private:
  BatchNormSpec spec_;
  Context& context_;
  BatchNormDescriptors d_;  // of the last build's input
  Param scale_, shift_;
  Tensor running_mean_, running_var_;
  Tensor saved_mean_, saved_inv_std_;  // from forward to backward
};

}  // namespace

std::unique_ptr<Layer> make_batch_norm(const LayerSpec& spec, const BatchNormSpec& bn, Context& context) {
  return std::make_unique<BatchNormLayer>(spec, bn, context);
}

}  // namespace tensortier::dnn::cudnn
