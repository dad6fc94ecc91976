// Writes what the PyTorch cross-check (crosscheck.py) compares against: a model's initial
// weights, five deterministic batches, the gradients of step 1 and the losses of five SGD steps,
// as raw float32 files and a JSON manifest.
// Usage: dnn_crosscheck_dump [--no-in-place] MODEL OUT_DIR [N C H W WIDTH LR [LAST]]   (--no-in-place:
// no ReLU or add in place, no batch norm fused with its ReLU or recomputed: MemoryOptions::none();
// MODEL: any make_model
// name; the batch shape N x C x H x W, the model's width and SGD's learning rate; LAST < N: the
// data set has 2N + LAST samples, so the batches are N, N, LAST (an epoch's last, partial batch),
// N, N: the network switches to primitives for LAST samples and back)
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tensortier/dnn/data.h"
#include "tensortier/dnn/models.h"

namespace {

using namespace tensortier;
using namespace tensortier::dnn;

void write_raw(const std::filesystem::path& path, const void* data, std::size_t bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
}

// Writes a parameter's tensor in PyTorch's layout (it may be blocked in ours).
bool write_plain(Engine& engine, const Param& p, const Tensor& t, const std::filesystem::path& path) {
  std::vector<float> plain(p.plain.get_size() / sizeof(float));
  if (!engine.reorder_now(t.desc(), t.address(), p.plain, plain.data()).is_ok()) return false;
  write_raw(path, plain.data(), plain.size() * sizeof(float));
  return true;
}

int fail(const std::string& message) {
  std::fprintf(stderr, "dnn_crosscheck_dump: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const bool in_place = !(argc > 1 && std::string(argv[1]) == "--no-in-place");
  if (!in_place) --argc, ++argv;
  if (argc != 3 && argc != 9 && argc != 10)
    return fail("usage: dnn_crosscheck_dump MODEL OUT_DIR [N C H W WIDTH LR [LAST]]");
  const std::string model = argv[1];
  const std::filesystem::path dir = argv[2];
  std::filesystem::create_directories(dir);
  dnnl::memory::dims input =
      model == "small_cnn" ? dnnl::memory::dims{8, 3, 12, 12} : dnnl::memory::dims{8, 3, 8, 8};
  int width = 8;
  float learning_rate = 0.05F;
  int last = 0;  // samples of the partial third batch; 0: none
  if (argc >= 9) {
    for (int i = 0; i < 4; ++i) input[static_cast<std::size_t>(i)] = std::atoi(argv[3 + i]);
    width = std::atoi(argv[7]);
    learning_rate = std::strtof(argv[8], nullptr);
    if (input[0] < 1 || input[1] < 1 || input[2] < 1 || input[3] < 1 || width < 1 || !(learning_rate > 0))
      return fail("N C H W WIDTH must be positive integers and LR a positive number");
  }
  if (argc == 10) {
    last = std::atoi(argv[9]);
    if (last < 1 || last >= input[0]) return fail("LAST must be a positive integer below N");
  }
  constexpr int kClasses = 4;
  const SgdOptions sgd{learning_rate, 0.9F, 1e-3F};

  auto rt = Runtime::create({"fast=dram:256MiB"});
  if (!rt) return fail(rt.status().to_string());
  Engine engine(*rt.value());
  engine.set_memory_options(in_place ? MemoryOptions{} : MemoryOptions::none());
  auto net = make_model(model, {kClasses, width});
  if (!net) return fail(net.status().to_string());
  if (Status s = net.value()->build(engine, input, 5); !s.is_ok()) return fail(s.to_string());
  net.value()->set_keep_gradients(true);  // step 1's gradients are written after its update

  nlohmann::json manifest{
      {"model", model},
      {"input", input},
      {"classes", kClasses},
      {"width", width},
      {"in_place", in_place},
      {"sgd", {{"lr", sgd.learning_rate}, {"momentum", sgd.momentum}, {"weight_decay", sgd.weight_decay}}}};
  for (const Layer* layer : net.value()->layers()) {  // the kernels chosen, e.g. Winograd convolutions
    if (!layer->implementation().empty())
      manifest["implementations"][layer->name()] = layer->implementation();
  }
  auto params = net.value()->params();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::string file = "init_" + std::to_string(i) + ".bin";
    if (!write_plain(engine, *params[i].second, params[i].second->value, dir / file))
      return fail("reorder failed");
    manifest["params"].push_back(
        {{"name", params[i].first}, {"shape", params[i].second->value.dims()}, {"init", file}});
  }
  const std::size_t samples = last > 0
                                  ? 2 * static_cast<std::size_t>(input[0]) + static_cast<std::size_t>(last)
                                  : 5 * static_cast<std::size_t>(input[0]);
  const Dataset data = synthetic_dataset(samples, static_cast<int>(input[1]), static_cast<int>(input[2]),
                                         static_cast<int>(input[3]), kClasses, 11);
  BatchIterator batches(data, static_cast<std::size_t>(input[0]), 3, /*shuffle=*/false);
  Batch batch;
  for (int step = 0; step < 5; ++step) {
    if (Status s = batches.next(engine, batch); !s.is_ok()) return fail(s.to_string());
    const std::string x = "batch" + std::to_string(step) + "_images.bin";
    const std::string y = "batch" + std::to_string(step) + "_labels.bin";
    write_raw(dir / x, batch.images.address(), batch.images.bytes());
    write_raw(dir / y, batch.labels.address(), batch.labels.bytes());
    manifest["batches"].push_back({{"images", x}, {"labels", y}, {"count", batch.labels.elements()}});
    if (Status s = rt.value()->step_begin(); !s.is_ok()) return fail(s.to_string());
    auto r = net.value()->train_step(engine, batch, sgd);
    if (Status s = rt.value()->step_end(); !s.is_ok()) return fail(s.to_string());
    if (!r) return fail(r.status().to_string());
    manifest["losses"].push_back(r->loss);
    if (step == 0) {  // .grad still holds step 1's gradients after its update
      for (std::size_t i = 0; i < params.size(); ++i) {
        const std::string file = "grad_" + std::to_string(i) + ".bin";
        if (!write_plain(engine, *params[i].second, params[i].second->grad, dir / file))
          return fail("reorder failed");
        manifest["params"][i]["grad"] = file;
      }
    }
  }
  std::ofstream(dir / "manifest.json") << manifest.dump(2) << '\n';
  std::printf("wrote %s\n", (dir / "manifest.json").c_str());
  return 0;
}
