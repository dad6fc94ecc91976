// The oneDNN backend's Add layer: the residual add of two inputs (oneDNN sum), in place where the network
// marks it.
#include "layers/onednn_layer.h"

#include <fmt/format.h>

namespace tensortier::dnn::onednn {
namespace {

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

std::unique_ptr<Layer> make_add(const std::string& name) {
  return std::make_unique<Add>(name);
}

}  // namespace tensortier::dnn::onednn
