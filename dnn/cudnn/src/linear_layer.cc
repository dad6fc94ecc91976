// The cuDNN backend's fully connected layer: cuBLAS GEMMs as linear_gemms() lays them out
// (row-major N x F input, O x F weights as PyTorch's, N x O output), the bias added by
// cudnnAddTensor and its gradient summed over the batch by cudnnConvolutionBackwardBias (the
// output seen as N,O,1,1), which needs no vector of ones.
#include "cudnn_layer.h"

namespace tensortier::dnn::cudnn {
namespace {

class LinearLayer final : public Layer {
 public:
  LinearLayer(const LayerSpec& spec, const LinearSpec& linear, Context& context)
      : Layer(spec.name), spec_(linear), context_(context) {}

  Result<dnnl::memory::desc> build(Engine& e, const std::vector<dnnl::memory::desc>& inputs) override {
    TENSORTIER_RETURN_IF_ERROR(need_inputs(name_, inputs, 1));
    const Dims in = inputs[0].dims();
    std::int64_t features = 1;
    for (std::size_t k = 1; k < in.size(); ++k) features *= in[k];
    auto gemms = linear_gemms(in[0], features, spec_.out_features);
    if (!gemms) return gemms.status();
    gemms_ = gemms.value();
    auto y = tensor_descriptor({in[0], spec_.out_features, 1, 1});
    if (!y) return y.status();
    y_ = std::move(y).value();
    if (weight_.value.empty()) {
      fan_in_ = static_cast<std::size_t>(features);
      TENSORTIER_RETURN_IF_ERROR(plain_param(e, name_ + ".weight", {spec_.out_features, features}, weight_));
      if (spec_.bias) {
        TENSORTIER_RETURN_IF_ERROR(plain_param(e, name_ + ".bias", {spec_.out_features}, bias_));
        auto b = tensor_descriptor({1, spec_.out_features, 1, 1});
        if (!b) return b.status();
        bias_desc_ = std::move(b).value();
      }
    }
    return plain_desc({in[0], spec_.out_features});
  }

  Status forward(Engine& e, const std::vector<const Tensor*>& in, const Tensor& out,
                 bool /*training*/) override {
    const Tensor* bias = spec_.bias ? &bias_.value : nullptr;
    return device_layer(e, name_, {in[0], &weight_.value, bias}, {&out}, [&]() -> Status {
      TENSORTIER_RETURN_IF_ERROR(
          gemm(gemms_.forward, weight_.value.address(), in[0]->address(), out.address()));
      if (bias == nullptr) return Status::ok();
      const float one = 1;
      TT_CUDNN(cudnnAddTensor(context_.cudnn, &one, bias_desc_.get(), bias->address(), &one, y_.get(),
                              out.address()));
      return Status::ok();
    });
  }

  Status backward(Engine& e, const std::vector<const Tensor*>& in, const Tensor& /*out*/,
                  const Tensor& diff_out, const std::vector<Tensor*>& diff_in) override {
    const Tensor* diff_bias = spec_.bias ? &bias_.grad : nullptr;
    return device_layer(
        e, name_ + ".bwd", {in[0], &weight_.value, &diff_out}, {&weight_.grad, diff_bias, diff_in[0]},
        [&]() -> Status {
          TENSORTIER_RETURN_IF_ERROR(
              gemm(gemms_.backward_weights, in[0]->address(), diff_out.address(), weight_.grad.address()));
          if (diff_bias != nullptr) {
            const float one = 1, zero = 0;
            TT_CUDNN(cudnnConvolutionBackwardBias(context_.cudnn, &one, y_.get(), diff_out.address(), &zero,
                                                  bias_desc_.get(), diff_bias->address()));
          }
          if (diff_in[0] == nullptr) return Status::ok();
          return gemm(gemms_.backward_data, weight_.value.address(), diff_out.address(),
                      diff_in[0]->address());
        });
  }

  bool backward_reads_input(std::size_t /*k*/) const override { return true; }
  std::vector<Param*> params() override {
    if (spec_.bias) return {&weight_, &bias_};
    return {&weight_};
  }
  Status init_params(Engine& e, std::uint64_t seed) override {
    return init_weight_and_bias(e, name_, weight_, spec_.bias ? &bias_ : nullptr, fan_in_, seed);
  }

 private:
  // C = op(A) op(B) in the Gemm's column-major terms; a, b, c are the operands it names.
  Status gemm(const Gemm& g, const void* a, const void* b, void* c) const {
    const float one = 1, zero = 0;
    return cublas_status(cublasSgemm(context_.cublas, g.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                                     g.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, g.m, g.n, g.k, &one,
                                     static_cast<const float*>(a), g.lda, static_cast<const float*>(b), g.ldb,
                                     &zero, static_cast<float*>(c), g.ldc),
                         "cublasSgemm");
  }

  LinearSpec spec_;
  Context& context_;
  LinearGemms gemms_;  // of the last build's batch
  TensorDescriptor y_, bias_desc_;
  std::size_t fan_in_ = 1;
  Param weight_, bias_;
};

}  // namespace

std::unique_ptr<Layer> make_linear(const LayerSpec& spec, const LinearSpec& linear, Context& context) {
  return std::make_unique<LinearLayer>(spec, linear, context);
}

}  // namespace tensortier::dnn::cudnn
