// The oneDNN backend's Pool layer: max and average pooling, global or windowed.
#include "layers/onednn_layer.h"

#include <fmt/format.h>

namespace tensortier::dnn::onednn {
namespace {

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

}  // namespace

std::unique_ptr<Layer> make_pool(const std::string& name, const PoolSpec& spec) {
  return std::make_unique<Pool>(name, spec.kind, spec.kernel, spec.stride, spec.padding, spec.global);
}

}  // namespace tensortier::dnn::onednn
