// The cuDNN backend's layers without parameters: ReLU (cudnnActivationForward / Backward, which
// reads the input and the output; in place, the output as both), max and average pooling (cudnnPoolingForward
// / Backward, which read both too) and the residual add (cudnnOpTensor; its gradient copied to both inputs).
// One file: each is a few calls over its descriptors.
#include <cuda_runtime_api.h>

#include <fmt/format.h>

#include "cudnn_layer.h"

namespace tensortier::dnn::cudnn {
namespace {

constexpr float kOne = 1, kZero = 0;

class ReluLayer final : public Layer {
 public:
  ReluLayer(const LayerSpec& spec, Context& context) : Layer(spec.name), context_(context) {}
  Result<dnnl::memory::desc> build(Engine& /*e*/, const std::vector<dnnl::memory::desc>& inputs) override {
    TENSORTIER_RETURN_IF_ERROR(need_inputs(name_, inputs, 1));
    auto d = relu_descriptors(inputs[0].dims());
    if (!d) return d.status();
    d_ = std::move(d).value();
    return inputs[0];
  }
  Status forward(Engine& e, const std::vector<const Tensor*>& in, const Tensor& out,
                 bool /*training*/) override {
    return device_layer(e, name_, {in[0]}, {&out}, [&]() -> Status {
      TT_CUDNN(cudnnActivationForward(context_.cudnn, d_.relu.get(), &kOne, d_.x.get(), in[0]->address(),
                                      &kZero, d_.x.get(), out.address()));
      return Status::ok();
    });
  }
  // In place (MemoryOptions::in_place: the output is the input's object), backward gives cuDNN the
  // output as x too: ReLU's gradient is dy where x > 0, and y > 0 exactly there (as Caffe runs
  // cuDNN's ReLU in place).
  Status backward(Engine& e, const std::vector<const Tensor*>& in, const Tensor& out, const Tensor& diff_out,
                  const std::vector<Tensor*>& diff_in) override {
    if (diff_in[0] == nullptr) return Status::ok();
    const Tensor* x = in_place_ ? &out : in[0];
    return device_layer(e, name_ + ".bwd", {x, &out, &diff_out}, {diff_in[0]}, [&]() -> Status {
      TT_CUDNN(cudnnActivationBackward(context_.cudnn, d_.relu.get(), &kOne, d_.x.get(), out.address(),
                                       d_.x.get(), diff_out.address(), d_.x.get(), x->address(), &kZero,
                                       d_.x.get(), diff_in[0]->address()));
      return Status::ok();
    });
  }
  bool can_run_in_place() const override { return true; }
  void set_in_place(bool on) override { in_place_ = on; }
  bool backward_reads_input(std::size_t /*k*/) const override { return !in_place_; }
  bool backward_reads_output() const override { return true; }
  bool is_relu() const override { return true; }

 private:
  Context& context_;
  ReluDescriptors d_;
  bool in_place_ = false;
};

class PoolLayer final : public Layer {
 public:
  PoolLayer(const LayerSpec& spec, const PoolSpec& pool, Context& context)
      : Layer(spec.name), spec_(pool), context_(context) {}
  Result<dnnl::memory::desc> build(Engine& /*e*/, const std::vector<dnnl::memory::desc>& inputs) override {
    TENSORTIER_RETURN_IF_ERROR(need_inputs(name_, inputs, 1));
    auto d = pool_descriptors(spec_, inputs[0].dims());
    if (!d) return d.status();
    d_ = std::move(d).value();
    auto out = dims_of(d_.y);
    if (!out) return out.status();
    return plain_desc(out.value());
  }
  Status forward(Engine& e, const std::vector<const Tensor*>& in, const Tensor& out,
                 bool /*training*/) override {
    return device_layer(e, name_, {in[0]}, {&out}, [&]() -> Status {
      TT_CUDNN(cudnnPoolingForward(context_.cudnn, d_.pool.get(), &kOne, d_.x.get(), in[0]->address(), &kZero,
                                   d_.y.get(), out.address()));
      return Status::ok();
    });
  }
  Status backward(Engine& e, const std::vector<const Tensor*>& in, const Tensor& out, const Tensor& diff_out,
                  const std::vector<Tensor*>& diff_in) override {
    if (diff_in[0] == nullptr) return Status::ok();
    return device_layer(e, name_ + ".bwd", {in[0], &out, &diff_out}, {diff_in[0]}, [&]() -> Status {
      TT_CUDNN(cudnnPoolingBackward(context_.cudnn, d_.pool.get(), &kOne, d_.y.get(), out.address(),
                                    d_.y.get(), diff_out.address(), d_.x.get(), in[0]->address(), &kZero,
                                    d_.x.get(), diff_in[0]->address()));
      return Status::ok();
    });
  }
  bool backward_reads_output() const override { return true; }

 private:
  PoolSpec spec_;
  Context& context_;
  PoolDescriptors d_;
};

class AddLayer final : public Layer {
 public:
  AddLayer(const LayerSpec& spec, Context& context) : Layer(spec.name), context_(context) {}
  Result<dnnl::memory::desc> build(Engine& /*e*/, const std::vector<dnnl::memory::desc>& inputs) override {
    TENSORTIER_RETURN_IF_ERROR(need_inputs(name_, inputs, 2));
    if (inputs[0].dims() != inputs[1].dims())
      return invalid_argument(fmt::format("layer '{}' adds two tensors of different shapes", name_));
    auto d = add_descriptors(inputs[0].dims());
    if (!d) return d.status();
    d_ = std::move(d).value();
    return inputs[0];
  }
  Status forward(Engine& e, const std::vector<const Tensor*>& in, const Tensor& out,
                 bool /*training*/) override {
    return device_layer(e, name_, {in[0], in[1]}, {&out}, [&]() -> Status {
      TT_CUDNN(cudnnOpTensor(context_.cudnn, d_.add.get(), &kOne, d_.x.get(), in[0]->address(), &kOne,
                             d_.x.get(), in[1]->address(), &kZero, d_.x.get(), out.address()));
      return Status::ok();
    });
  }
  // The sum's gradient is each input's: copied on the device stream.
  Status backward(Engine& e, const std::vector<const Tensor*>& /*in*/, const Tensor& /*out*/,
                  const Tensor& diff_out, const std::vector<Tensor*>& diff_in) override {
    return device_layer(e, name_ + ".bwd", {&diff_out}, {diff_in[0], diff_in[1]}, [&]() -> Status {
      for (const Tensor* d : diff_in) {
        if (d == nullptr) continue;
        TENSORTIER_RETURN_IF_ERROR(cuda_call_status(
            cudaMemcpyAsync(d->address(), diff_out.address(), diff_out.bytes(), cudaMemcpyDefault,
                            reinterpret_cast<cudaStream_t>(context_.stream)),
            "cudaMemcpyAsync"));
      }
      return Status::ok();
    });
  }
  bool backward_reads_input(std::size_t /*k*/) const override { return false; }

 private:
  Context& context_;
  AddDescriptors d_;
};

}  // namespace

std::unique_ptr<Layer> make_relu(const LayerSpec& spec, Context& context) {
  return std::make_unique<ReluLayer>(spec, context);
}
std::unique_ptr<Layer> make_pool(const LayerSpec& spec, const PoolSpec& pool, Context& context) {
  return std::make_unique<PoolLayer>(spec, pool, context);
}
std::unique_ptr<Layer> make_add(const LayerSpec& spec, Context& context) {
  return std::make_unique<AddLayer>(spec, context);
}

}  // namespace tensortier::dnn::cudnn
