// Model builders: MLP, LeNet-5, VGG-11/16 (and with batch norm), ResNet-18/34/50 (basic and bottleneck
// blocks), and two small models the PyTorch cross-check uses. Shapes are parameters; the builders only wire
// layers, Network::build() sizes them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tensortier/dnn/network.h"

namespace tensortier::dnn {

struct ModelOptions {
  int classes = 10;
  int width = 64;  // channels of the first stage (VGG, ResNet); hidden units of the MLP
};

// Names: mlp, lenet5, vgg11, vgg16, vgg11_bn, vgg16_bn, resnet18, resnet34, resnet50, small_cnn, resblock.
// An unknown name is an error listing the known ones.
Result<std::unique_ptr<Network>> make_model(const std::string& name, const ModelOptions& options);
std::vector<std::string> model_names();

}  // namespace tensortier::dnn
