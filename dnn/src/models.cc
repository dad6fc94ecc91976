// Model builders (see models.h). ResNets follow the CIFAR-style stem (3x3 conv, no max pool) used
// for 32x32 inputs, with the stage layout of He et al. 2016; VGG follows Simonyan & Zisserman
// 2015 configurations A (11) and D (16) with one linear classifier, as CIFAR variants do.
#include "tensortier/dnn/models.h"

#include <fmt/format.h>

namespace tensortier::dnn {
namespace {

using Net = std::unique_ptr<Network>;

int conv_bn_relu(Network& n, const std::string& name, int in, int channels, int kernel, int stride,
                 int padding, bool relu = true) {
  int x = n.add(make_conv(name, {channels, kernel, stride, padding, /*bias=*/false}), {in});
  x = n.add(make_batch_norm(name + ".bn"), {x});
  return relu ? n.add(make_relu(name + ".relu"), {x}) : x;
}

Net mlp(const ModelOptions& o) {
  auto n = std::make_unique<Network>("mlp");
  n->add(make_linear("fc1", o.width * 4));
  n->add(make_relu("relu1"));
  n->add(make_linear("fc2", o.width * 2));
  n->add(make_relu("relu2"));
  n->add(make_linear("fc3", o.classes));
  return n;
}

Net lenet5(const ModelOptions& o) {
  auto n = std::make_unique<Network>("lenet5");
  n->add(make_conv("conv1", {6, 5, 1, 2, true}));
  n->add(make_relu("relu1"));
  n->add(make_pool("pool1", PoolKind::kMax, 2, 2));
  n->add(make_conv("conv2", {16, 5, 1, 0, true}));
  n->add(make_relu("relu2"));
  n->add(make_pool("pool2", PoolKind::kMax, 2, 2));
  n->add(make_linear("fc1", 120));
  n->add(make_relu("relu3"));
  n->add(make_linear("fc2", 84));
  n->add(make_relu("relu4"));
  n->add(make_linear("fc3", o.classes));
  return n;
}

// VGG-11/16; `batch_norm`: torchvision's vgg11_bn / vgg16_bn, a batch norm between every conv
// (which keeps its bias, as torchvision's does) and its ReLU, named after the conv ("conv1.bn").
Net vgg(int depth, bool batch_norm, const ModelOptions& o) {
  // Channels per conv as multiples of width/64; 0 = 2x2 max pool.
  const std::vector<int> a{1, 0, 2, 0, 4, 4, 0, 8, 8, 0, 8, 8, 0};
  const std::vector<int> d{1, 1, 0, 2, 2, 0, 4, 4, 4, 0, 8, 8, 8, 0, 8, 8, 8, 0};
  auto n = std::make_unique<Network>(fmt::format("vgg{}{}", depth, batch_norm ? "_bn" : ""));
  int conv = 0, pool = 0;
  for (int c : depth == 11 ? a : d) {
    if (c == 0) {
      n->add(make_pool(fmt::format("pool{}", ++pool), PoolKind::kMax, 2, 2));
      continue;
    }
    ++conv;
    n->add(make_conv(fmt::format("conv{}", conv), {c * o.width, 3, 1, 1, true}));
    if (batch_norm) n->add(make_batch_norm(fmt::format("conv{}.bn", conv)));
    n->add(make_relu(fmt::format("relu{}", conv)));
  }
  n->add(make_linear("fc", o.classes));
  return n;
}

// Basic block (two 3x3 convs) or bottleneck (1x1, 3x3, 1x1 x4), with a projection shortcut
// when the shape changes.
int block(Network& n, const std::string& name, int in, int in_channels, int channels, int stride,
          bool bottleneck) {
  const int out_channels = bottleneck ? channels * 4 : channels;
  int x = in;
  if (bottleneck) {
    x = conv_bn_relu(n, name + ".conv1", x, channels, 1, 1, 0);
    x = conv_bn_relu(n, name + ".conv2", x, channels, 3, stride, 1);
    x = conv_bn_relu(n, name + ".conv3", x, out_channels, 1, 1, 0, /*relu=*/false);
  } else {
    x = conv_bn_relu(n, name + ".conv1", x, channels, 3, stride, 1);
    x = conv_bn_relu(n, name + ".conv2", x, channels, 3, 1, 1, /*relu=*/false);
  }
  int shortcut = in;
  if (stride != 1 || in_channels != out_channels) {
    shortcut = conv_bn_relu(n, name + ".downsample", in, out_channels, 1, stride, 0, /*relu=*/false);
  }
  const int sum = n.add(make_add(name + ".add"), {x, shortcut});
  return n.add(make_relu(name + ".relu"), {sum});
}

Net resnet(int depth, const ModelOptions& o) {
  const bool bottleneck = depth >= 50;
  const std::vector<int> blocks = depth == 18 ? std::vector<int>{2, 2, 2, 2} : std::vector<int>{3, 4, 6, 3};
  auto n = std::make_unique<Network>(fmt::format("resnet{}", depth));
  int x = conv_bn_relu(*n, "stem", Network::kInput, o.width, 3, 1, 1);
  int in_channels = o.width;
  for (int stage = 0; stage < 4; ++stage) {
    const int channels = o.width << stage;
    for (int b = 0; b < blocks[static_cast<std::size_t>(stage)]; ++b) {
      x = block(*n, fmt::format("layer{}.{}", stage + 1, b), x, in_channels, channels,
                b == 0 && stage > 0 ? 2 : 1, bottleneck);
      in_channels = bottleneck ? channels * 4 : channels;
    }
  }
  n->add(make_global_avg_pool("avgpool"), {x});
  n->add(make_linear("fc", o.classes));
  return n;
}

// The PyTorch cross-check's models (tests/torch/crosscheck.py builds the same ones).
Net small_cnn(const ModelOptions& o) {
  auto n = std::make_unique<Network>("small_cnn");
  n->add(make_conv("conv1", {8, 3, 1, 1, true}));
  n->add(make_relu("relu1"));
  n->add(make_pool("pool1", PoolKind::kMax, 2, 2));
  n->add(make_conv("conv2", {16, 3, 1, 1, true}));
  n->add(make_relu("relu2"));
  n->add(make_pool("pool2", PoolKind::kAverage, 2, 2));
  n->add(make_linear("fc", o.classes));
  return n;
}

Net resblock(const ModelOptions& o) {
  auto n = std::make_unique<Network>("resblock");
  const int stem = conv_bn_relu(*n, "stem", Network::kInput, 8, 3, 1, 1);
  const int out = block(*n, "block", stem, 8, 8, 1, false);
  n->add(make_global_avg_pool("avgpool"), {out});
  n->add(make_linear("fc", o.classes));
  return n;
}

}  // namespace

std::vector<std::string> model_names() {
  return {"mlp",      "lenet5",   "vgg11",    "vgg16",     "vgg11_bn", "vgg16_bn",
          "resnet18", "resnet34", "resnet50", "small_cnn", "resblock"};
}

Result<std::unique_ptr<Network>> make_model(const std::string& name, const ModelOptions& o) {
  if (o.classes < 2)
    return invalid_argument(fmt::format("{} classes: a classifier needs at least 2", o.classes));
  if (o.width < 1) return invalid_argument(fmt::format("width {}: must be at least 1", o.width));
  if (name == "mlp") return mlp(o);
  if (name == "lenet5") return lenet5(o);
  if (name == "vgg11") return vgg(11, false, o);
  if (name == "vgg16") return vgg(16, false, o);
  if (name == "vgg11_bn") return vgg(11, true, o);
  if (name == "vgg16_bn") return vgg(16, true, o);
  if (name == "resnet18") return resnet(18, o);
  if (name == "resnet34") return resnet(34, o);
  if (name == "resnet50") return resnet(50, o);
  if (name == "small_cnn") return small_cnn(o);
  if (name == "resblock") return resblock(o);
  std::string known;
  for (const auto& m : model_names()) known += (known.empty() ? "" : ", ") + m;
  return invalid_argument(fmt::format("unknown model '{}' (known: {})", name, known));
}

}  // namespace tensortier::dnn
