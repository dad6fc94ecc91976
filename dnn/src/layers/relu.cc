// The oneDNN backend's Relu layer: ReLU, in place where the network marks it.
#include "layers/onednn_layer.h"

#include <fmt/format.h>

namespace tensortier::dnn::onednn {
namespace {

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

}  // namespace

std::unique_ptr<Layer> make_relu(const std::string& name) {
  return std::make_unique<Relu>(name);
}

}  // namespace tensortier::dnn::onednn
