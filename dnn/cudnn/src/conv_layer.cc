// The cuDNN backend's convolution: cudnnConvolutionForward / BackwardData / BackwardFilter /
// BackwardBias with algorithms chosen once per input shape from cuDNN's heuristics (the first
// that is deterministic where asked, computes in the math mode asked and needs at most the
// backend's workspace limit: algorithm_choice.h), workspaces as runtime objects for the one call
// that needs them.
#include <map>

#include <fmt/format.h>

#include "cudnn_layer.h"
#include "tensortier/dnn/cudnn/algorithm_choice.h"

namespace tensortier::dnn::cudnn {
namespace {

class ConvLayer final : public Layer {
 public:
  ConvLayer(const LayerSpec& spec, const ConvSpec& conv, Context& context)
      : Layer(spec.name), spec_(conv), context_(context) {}

  Result<dnnl::memory::desc> build(Engine& e, const std::vector<dnnl::memory::desc>& inputs) override {
    TENSORTIER_RETURN_IF_ERROR(need_inputs(name_, inputs, 1));
    const Dims in = inputs[0].dims();
    if (auto found = shapes_.find(in); found != shapes_.end()) {
      current_ = &found->second;
      return current_->output;
    }
    Shape shape;
    auto d = conv_descriptors(spec_, in, context_.math);
    if (!d) return d.status();
    shape.d = std::move(d).value();
    auto out = dims_of(shape.d.y);
    if (!out) return out.status();
    shape.output = plain_desc(out.value());
    TENSORTIER_RETURN_IF_ERROR(choose_algorithms(shape));
    if (weight_.value.empty()) {
      fan_in_ = static_cast<std::size_t>(in[1]) * static_cast<std::size_t>(spec_.kernel * spec_.kernel);
      TENSORTIER_RETURN_IF_ERROR(plain_param(
          e, name_ + ".weight", {spec_.out_channels, in[1], spec_.kernel, spec_.kernel}, weight_));
      if (spec_.bias)
        TENSORTIER_RETURN_IF_ERROR(plain_param(e, name_ + ".bias", {spec_.out_channels}, bias_));
    }
    current_ = &shapes_.emplace(in, std::move(shape)).first->second;
    return current_->output;
  }

  Status forward(Engine& e, const std::vector<const Tensor*>& in, const Tensor& out,
                 bool /*training*/) override {
    const Shape& s = *current_;
    auto ws = workspace(e, name_ + ".fwd.workspace", s.fwd_bytes);
    if (!ws) return ws.status();
    const Tensor* bias = spec_.bias ? &bias_.value : nullptr;
    Status status =
        device_layer(e, name_, {in[0], &weight_.value, bias}, {&out, &ws.value()}, [&]() -> Status {
          const float one = 1, zero = 0;
          TT_CUDNN(cudnnConvolutionForward(context_.cudnn, &one, s.d.x.get(), in[0]->address(), s.d.w.get(),
                                           weight_.value.address(), s.d.conv.get(), s.fwd, ws->address(),
                                           s.fwd_bytes, &zero, s.d.y.get(), out.address()));
          if (bias != nullptr)
            TT_CUDNN(cudnnAddTensor(context_.cudnn, &one, s.d.bias.get(), bias->address(), &one, s.d.y.get(),
                                    out.address()));
          return Status::ok();
        });
    e.release(ws.value());
    return status;
  }

  Status backward(Engine& e, const std::vector<const Tensor*>& in, const Tensor& /*out*/,
                  const Tensor& diff_out, const std::vector<Tensor*>& diff_in) override {
    const Shape& s = *current_;
    auto ws = workspace(e, name_ + ".bwd.workspace", std::max(s.data_bytes, s.filter_bytes));
    if (!ws) return ws.status();
    const Tensor* diff_bias = spec_.bias ? &bias_.grad : nullptr;
    Status status = device_layer(
        e, name_ + ".bwd", {in[0], &weight_.value, &diff_out},
        {&weight_.grad, diff_bias, diff_in[0], &ws.value()}, [&]() -> Status {
          const float one = 1, zero = 0;
          void* w = ws->empty() ? nullptr : ws->address();
          if (diff_bias != nullptr)
            TT_CUDNN(cudnnConvolutionBackwardBias(context_.cudnn, &one, s.d.y.get(), diff_out.address(),
                                                  &zero, s.d.bias.get(), diff_bias->address()));
          TT_CUDNN(cudnnConvolutionBackwardFilter(
              context_.cudnn, &one, s.d.x.get(), in[0]->address(), s.d.y.get(), diff_out.address(),
              s.d.conv.get(), s.filter, w, s.filter_bytes, &zero, s.d.w.get(), weight_.grad.address()));
          if (diff_in[0] == nullptr) return Status::ok();
          TT_CUDNN(cudnnConvolutionBackwardData(context_.cudnn, &one, s.d.w.get(), weight_.value.address(),
                                                s.d.y.get(), diff_out.address(), s.d.conv.get(), s.data, w,
                                                s.data_bytes, &zero, s.d.x.get(), diff_in[0]->address()));
          return Status::ok();
        });
    e.release(ws.value());
    return status;
  }

  bool backward_reads_input(std::size_t /*k*/) const override { return true; }
  std::vector<Param*> params() override {
    if (spec_.bias) return {&weight_, &bias_};
    return {&weight_};
  }
  Status init_params(Engine& e, std::uint64_t seed) override {
    return init_weight_and_bias(e, name_, weight_, spec_.bias ? &bias_ : nullptr, fan_in_, seed);
  }
  std::string implementation() const override {
    if (current_ == nullptr) return {};
    return fmt::format("cudnn algorithms {} / {} / {}", static_cast<int>(current_->fwd),
                       static_cast<int>(current_->data), static_cast<int>(current_->filter));
  }

 private:
  struct Shape {
    ConvDescriptors d;
    dnnl::memory::desc output;
    cudnnConvolutionFwdAlgo_t fwd{};
    cudnnConvolutionBwdDataAlgo_t data{};
    cudnnConvolutionBwdFilterAlgo_t filter{};
    std::size_t fwd_bytes = 0, data_bytes = 0, filter_bytes = 0;  // their workspaces
  };

  Status choose_algorithms(Shape& s) {
    constexpr int kMax = 16;
    int count = 0;
    cudnnConvolutionFwdAlgoPerf_t fwd[kMax];
    TT_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(context_.cudnn, s.d.x.get(), s.d.w.get(), s.d.conv.get(),
                                                    s.d.y.get(), kMax, &count, fwd));
    auto f = pick_algorithm(fwd, count, needs(), "forward");
    if (!f) return f.status();
    cudnnConvolutionBwdDataAlgoPerf_t data[kMax];
    TT_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(context_.cudnn, s.d.w.get(), s.d.y.get(),
                                                         s.d.conv.get(), s.d.x.get(), kMax, &count, data));
    auto d = pick_algorithm(data, count, needs(), "backward-data");
    if (!d) return d.status();
    cudnnConvolutionBwdFilterAlgoPerf_t filter[kMax];
    TT_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        context_.cudnn, s.d.x.get(), s.d.y.get(), s.d.conv.get(), s.d.w.get(), kMax, &count, filter));
    auto w = pick_algorithm(filter, count, needs(), "backward-filter");
    if (!w) return w.status();
    s.fwd = f->algo;
    s.data = d->algo;
    s.filter = w->algo;
    TT_CUDNN(cudnnGetConvolutionForwardWorkspaceSize(context_.cudnn, s.d.x.get(), s.d.w.get(), s.d.conv.get(),
                                                     s.d.y.get(), s.fwd, &s.fwd_bytes));
    TT_CUDNN(cudnnGetConvolutionBackwardDataWorkspaceSize(
        context_.cudnn, s.d.w.get(), s.d.y.get(), s.d.conv.get(), s.d.x.get(), s.data, &s.data_bytes));
    TT_CUDNN(cudnnGetConvolutionBackwardFilterWorkspaceSize(
        context_.cudnn, s.d.x.get(), s.d.y.get(), s.d.conv.get(), s.d.w.get(), s.filter, &s.filter_bytes));
    return Status::ok();
  }

  AlgorithmNeeds needs() const {
    return {context_.deterministic, context_.math, context_.workspace_limit_bytes};
  }

  ConvSpec spec_;
  Context& context_;
  std::size_t fan_in_ = 1;
  std::map<Dims, Shape> shapes_;  // per input shape (a batch size)
  const Shape* current_ = nullptr;
  Param weight_, bias_;
};

}  // namespace

std::unique_ptr<Layer> make_conv(const LayerSpec& spec, const ConvSpec& conv, Context& context) {
  return std::make_unique<ConvLayer>(spec, conv, context);
}

}  // namespace tensortier::dnn::cudnn
