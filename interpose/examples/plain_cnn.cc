// plain_cnn: a small CNN trained with oneDNN 2.6 alone (no tensortier call anywhere), the way a
// program written for oneDNN does it: primitives built once per batch size, parameters made once
// and initialized through get_data_handle, each batch filled by hand through get_data_handle, and
// every activation and gradient a memory made for the iteration and destroyed after it. SGD is
// oneDNN's sum primitive in place (w = w - lr * dw). After each epoch a forward-inference pass
// scores a held-out set; the last batch of an epoch is partial. Prints each epoch's loss and
// accuracy and a checksum of the parameters' bits, so two runs compare by their output; the
// median training step's time goes to stderr.
//
// It is the interposer's test client and its example (docs/INTERPOSE.md):
//   build/release/interpose/tensortier-run --policy sentinel --fast-budget 20% --
//       build/release/interpose/plain_cnn --epochs 3   (one line)
//
//   input 1x32x32 -> conv 3x3 (16) -> ReLU (in place) -> max pool 2 -> conv 3x3 (32) -> ReLU
//   -> max pool 2 -> inner product (10) -> softmax cross-entropy (on the host)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

namespace {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;
using tag = memory::format_tag;
using dt = memory::data_type;
using Args = std::unordered_map<int, memory>;

constexpr int kSide = 32, kC1 = 16, kC2 = 32, kClasses = 10;
constexpr int kBlock = kSide / 4, kHalf = kSide / 2, kQuarter = kSide / 4;
constexpr float kLearningRate = 0.2F;

struct Options {
  int epochs = 3;
  int train = 200;  // examples an epoch: 6 batches of 32 and one of 8
  int batch = 32;
  int test = 50;
  int beside = 0;  // a second thread running oneDNN convolutions of this batch size while training (0: none)
};

// A deterministic generator (the same numbers on every machine).
struct Lcg {
  std::uint64_t state;
  float uniform() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<float>((state >> 40) & 0xFFFFFF) / static_cast<float>(0x1000000);
  }
};

// Example i: class i % 10, an image whose bright block (a quarter of the side) sits where the class
// says, plus noise.
int fill_example(int i, float* image) {
  Lcg rng{static_cast<std::uint64_t>(i) * 7919 + 1};
  const int label = i % kClasses;
  for (int y = 0; y < kSide; ++y) {
    for (int x = 0; x < kSide; ++x) {
      const bool on = y / kBlock == label % 4 && x / kBlock == (label / 4 + y % 2) % 4;
      image[y * kSide + x] = (on ? 1.0F : 0.0F) + 0.3F * rng.uniform();
    }
  }
  return label;
}

memory::desc md(const memory::dims& dims, tag t) {
  return {dims, dt::f32, t};
}

struct Params {
  memory c1_w, c1_b, c2_w, c2_b, fc_w, fc_b;
};

Params make_params(const dnnl::engine& eng) {
  Params p{memory(md({kC1, 1, 3, 3}, tag::oihw), eng),
           memory(md({kC1}, tag::x), eng),
           memory(md({kC2, kC1, 3, 3}, tag::oihw), eng),
           memory(md({kC2}, tag::x), eng),
           memory(md({kClasses, kC2, kQuarter, kQuarter}, tag::oihw), eng),
           memory(md({kClasses}, tag::x), eng)};
  Lcg rng{42};
  for (memory* m : {&p.c1_w, &p.c1_b, &p.c2_w, &p.c2_b, &p.fc_w, &p.fc_b}) {
    auto* data = static_cast<float*>(m->get_data_handle());
    const std::size_t n = m->get_desc().get_size() / sizeof(float);
    const memory::dims dims = m->get_desc().dims();
    const float fan_in = dims.size() == 4 ? static_cast<float>(dims[1] * dims[2] * dims[3]) : 1.0F;
    for (std::size_t k = 0; k < n; ++k)
      data[k] = dims.size() == 4 ? (rng.uniform() - 0.5F) * 2 / std::sqrt(fan_in) : 0;
  }
  return p;
}

// Primitives for one batch size: training (forward and backward) or inference only.
struct Net {
  int n = 0;
  bool training = true;
  dnnl::convolution_forward::primitive_desc c1, c2;
  dnnl::eltwise_forward::primitive_desc r1, r2;
  dnnl::pooling_forward::primitive_desc p1, p2;
  dnnl::inner_product_forward::primitive_desc fc;
  dnnl::convolution_backward_weights::primitive_desc c1_bw, c2_bw;
  dnnl::convolution_backward_data::primitive_desc c2_bd;
  dnnl::eltwise_backward::primitive_desc r1_b, r2_b;
  dnnl::pooling_backward::primitive_desc p1_b, p2_b;
  dnnl::inner_product_backward_data::primitive_desc fc_bd;
  dnnl::inner_product_backward_weights::primitive_desc fc_bw;
  std::map<std::string, dnnl::primitive> prim;
  memory input;  // the batch, filled by hand
};

Net make_net(const dnnl::engine& eng, int n, bool training) {
  Net net;
  net.n = n;
  net.training = training;
  const prop_kind fwd = training ? prop_kind::forward_training : prop_kind::forward_inference;
  const memory::dims s1 = {1, 1}, s2 = {2, 2}, k2 = {2, 2}, pad1 = {1, 1}, pad0 = {0, 0};
  const auto x = md({n, 1, kSide, kSide}, tag::nchw), a1 = md({n, kC1, kSide, kSide}, tag::nchw),
             h1 = md({n, kC1, kHalf, kHalf}, tag::nchw), a2 = md({n, kC2, kHalf, kHalf}, tag::nchw),
             h2 = md({n, kC2, kQuarter, kQuarter}, tag::nchw), y = md({n, kClasses}, tag::nc);
  const auto w1 = md({kC1, 1, 3, 3}, tag::oihw), w2 = md({kC2, kC1, 3, 3}, tag::oihw),
             wf = md({kClasses, kC2, kQuarter, kQuarter}, tag::oihw), b1 = md({kC1}, tag::x),
             b2 = md({kC2}, tag::x), bf = md({kClasses}, tag::x);
  const auto direct = algorithm::convolution_direct;
  const auto relu = algorithm::eltwise_relu_use_dst_for_bwd;
  const auto pmax = algorithm::pooling_max;
  net.c1 = {{fwd, direct, x, w1, b1, a1, s1, pad1, pad1}, eng};
  net.r1 = {{fwd, relu, a1, 0.0F}, eng};
  net.p1 = {{fwd, pmax, a1, h1, s2, k2, pad0, pad0}, eng};
  net.c2 = {{fwd, direct, h1, w2, b2, a2, s1, pad1, pad1}, eng};
  net.r2 = {{fwd, relu, a2, 0.0F}, eng};
  net.p2 = {{fwd, pmax, a2, h2, s2, k2, pad0, pad0}, eng};
  net.fc = {{fwd, h2, wf, bf, y}, eng};
  net.prim["c1"] = dnnl::convolution_forward(net.c1);
  net.prim["r1"] = dnnl::eltwise_forward(net.r1);
  net.prim["p1"] = dnnl::pooling_forward(net.p1);
  net.prim["c2"] = dnnl::convolution_forward(net.c2);
  net.prim["r2"] = dnnl::eltwise_forward(net.r2);
  net.prim["p2"] = dnnl::pooling_forward(net.p2);
  net.prim["fc"] = dnnl::inner_product_forward(net.fc);
  net.input = memory(x, eng);
  if (!training) return net;
  net.fc_bd = {{h2, wf, y}, eng, net.fc};
  net.fc_bw = {{h2, wf, bf, y}, eng, net.fc};
  net.p2_b = {{pmax, a2, h2, s2, k2, pad0, pad0}, eng, net.p2};
  net.r2_b = {{relu, a2, a2, 0.0F}, eng, net.r2};
  net.c2_bw = {{direct, h1, w2, b2, a2, s1, pad1, pad1}, eng, net.c2};
  net.c2_bd = {{direct, h1, w2, a2, s1, pad1, pad1}, eng, net.c2};
  net.p1_b = {{pmax, a1, h1, s2, k2, pad0, pad0}, eng, net.p1};
  net.r1_b = {{relu, a1, a1, 0.0F}, eng, net.r1};
  net.c1_bw = {{direct, x, w1, b1, a1, s1, pad1, pad1}, eng, net.c1};
  net.prim["fc_bd"] = dnnl::inner_product_backward_data(net.fc_bd);
  net.prim["fc_bw"] = dnnl::inner_product_backward_weights(net.fc_bw);
  net.prim["p2_b"] = dnnl::pooling_backward(net.p2_b);
  net.prim["r2_b"] = dnnl::eltwise_backward(net.r2_b);
  net.prim["c2_bw"] = dnnl::convolution_backward_weights(net.c2_bw);
  net.prim["c2_bd"] = dnnl::convolution_backward_data(net.c2_bd);
  net.prim["p1_b"] = dnnl::pooling_backward(net.p1_b);
  net.prim["r1_b"] = dnnl::eltwise_backward(net.r1_b);
  net.prim["c1_bw"] = dnnl::convolution_backward_weights(net.c1_bw);
  return net;
}

// SGD as the sum primitive in place: w = 1 * w + (-lr) * dw.
struct Sgd {
  std::vector<dnnl::sum> sums;
  explicit Sgd(const dnnl::engine& eng, const Params& p) {
    for (const memory* w : {&p.c1_w, &p.c1_b, &p.c2_w, &p.c2_b, &p.fc_w, &p.fc_b}) {
      const memory::desc d = w->get_desc();
      sums.emplace_back(dnnl::sum::primitive_desc(d, {1.0F, -kLearningRate}, {d, d}, eng));
    }
  }
};

// Fills the batch of examples [first, first + n) by hand; returns their labels.
std::vector<int> fill_batch(const memory& input, int first, int n) {
  auto* data = static_cast<float*>(input.get_data_handle());
  std::vector<int> labels(n);
  for (int i = 0; i < n; ++i)
    labels[i] = fill_example(first + i, data + static_cast<std::size_t>(i) * kSide * kSide);
  return labels;
}

// Softmax cross-entropy on the host: the batch's mean loss, its gradient into `diff` (may be null),
// and the number of correct predictions.
double softmax_xent(const memory& logits, const std::vector<int>& labels, memory* diff, int* correct) {
  const auto* y = static_cast<const float*>(logits.get_data_handle());
  float* dy = diff != nullptr ? static_cast<float*>(diff->get_data_handle()) : nullptr;
  double loss = 0;
  const int n = static_cast<int>(labels.size());
  for (int i = 0; i < n; ++i) {
    const float* row = y + static_cast<std::size_t>(i) * kClasses;
    float top = row[0];
    int arg = 0;
    for (int k = 1; k < kClasses; ++k) {
      if (row[k] > top) top = row[k], arg = k;
    }
    double sum = 0;
    for (int k = 0; k < kClasses; ++k) sum += std::exp(static_cast<double>(row[k] - top));
    loss += std::log(sum) - (row[labels[i]] - top);
    *correct += arg == labels[i];
    for (int k = 0; dy != nullptr && k < kClasses; ++k) {
      const double p = std::exp(static_cast<double>(row[k] - top)) / sum;
      dy[static_cast<std::size_t>(i) * kClasses + k] = static_cast<float>((p - (k == labels[i])) / n);
    }
  }
  return loss / n;
}

// Forward through the net into fresh memories; returns the logits. `keep` receives the
// activations backward reads.
memory forward(Net& net, const Params& p, const dnnl::engine& eng, dnnl::stream& s,
               std::map<std::string, memory>& keep) {
  keep["a1"] = memory(net.c1.dst_desc(), eng);
  net.prim["c1"].execute(s, {{DNNL_ARG_SRC, net.input},
                             {DNNL_ARG_WEIGHTS, p.c1_w},
                             {DNNL_ARG_BIAS, p.c1_b},
                             {DNNL_ARG_DST, keep["a1"]}});
  net.prim["r1"].execute(s, {{DNNL_ARG_SRC, keep["a1"]}, {DNNL_ARG_DST, keep["a1"]}});  // in place
  keep["h1"] = memory(net.p1.dst_desc(), eng);
  Args pool1{{DNNL_ARG_SRC, keep["a1"]}, {DNNL_ARG_DST, keep["h1"]}};
  if (net.training) pool1[DNNL_ARG_WORKSPACE] = keep["ws1"] = memory(net.p1.workspace_desc(), eng);
  net.prim["p1"].execute(s, pool1);
  keep["a2"] = memory(net.c2.dst_desc(), eng);
  net.prim["c2"].execute(s, {{DNNL_ARG_SRC, keep["h1"]},
                             {DNNL_ARG_WEIGHTS, p.c2_w},
                             {DNNL_ARG_BIAS, p.c2_b},
                             {DNNL_ARG_DST, keep["a2"]}});
  net.prim["r2"].execute(s, {{DNNL_ARG_SRC, keep["a2"]}, {DNNL_ARG_DST, keep["a2"]}});
  keep["h2"] = memory(net.p2.dst_desc(), eng);
  Args pool2{{DNNL_ARG_SRC, keep["a2"]}, {DNNL_ARG_DST, keep["h2"]}};
  if (net.training) pool2[DNNL_ARG_WORKSPACE] = keep["ws2"] = memory(net.p2.workspace_desc(), eng);
  net.prim["p2"].execute(s, pool2);
  memory logits(net.fc.dst_desc(), eng);
  net.prim["fc"].execute(s, {{DNNL_ARG_SRC, keep["h2"]},
                             {DNNL_ARG_WEIGHTS, p.fc_w},
                             {DNNL_ARG_BIAS, p.fc_b},
                             {DNNL_ARG_DST, logits}});
  s.wait();
  return logits;
}

// One training step on examples [first, first + n); returns the batch's loss.
double train_step(Net& net, const Params& p, const Sgd& sgd, const dnnl::engine& eng, dnnl::stream& s,
                  int first, int* correct) {
  const std::vector<int> labels = fill_batch(net.input, first, net.n);
  std::map<std::string, memory> a;
  const memory logits = forward(net, p, eng, s, a);
  memory d_logits(net.fc.dst_desc(), eng);
  const double loss = softmax_xent(logits, labels, &d_logits, correct);
  memory d_h2(net.fc_bd.diff_src_desc(), eng), d_fc_w(net.fc_bw.diff_weights_desc(), eng),
      d_fc_b(net.fc_bw.diff_bias_desc(), eng);
  net.prim["fc_bd"].execute(
      s, {{DNNL_ARG_DIFF_DST, d_logits}, {DNNL_ARG_WEIGHTS, p.fc_w}, {DNNL_ARG_DIFF_SRC, d_h2}});
  net.prim["fc_bw"].execute(s, {{DNNL_ARG_SRC, a["h2"]},
                                {DNNL_ARG_DIFF_DST, d_logits},
                                {DNNL_ARG_DIFF_WEIGHTS, d_fc_w},
                                {DNNL_ARG_DIFF_BIAS, d_fc_b}});
  memory d_a2(net.p2_b.diff_src_desc(), eng);
  net.prim["p2_b"].execute(
      s, {{DNNL_ARG_DIFF_DST, d_h2}, {DNNL_ARG_WORKSPACE, a["ws2"]}, {DNNL_ARG_DIFF_SRC, d_a2}});
  net.prim["r2_b"].execute(s,
                           {{DNNL_ARG_DST, a["a2"]}, {DNNL_ARG_DIFF_DST, d_a2}, {DNNL_ARG_DIFF_SRC, d_a2}});
  memory d_c2_w(net.c2_bw.diff_weights_desc(), eng), d_c2_b(net.c2_bw.diff_bias_desc(), eng);
  net.prim["c2_bw"].execute(s, {{DNNL_ARG_SRC, a["h1"]},
                                {DNNL_ARG_DIFF_DST, d_a2},
                                {DNNL_ARG_DIFF_WEIGHTS, d_c2_w},
                                {DNNL_ARG_DIFF_BIAS, d_c2_b}});
  memory d_h1(net.c2_bd.diff_src_desc(), eng);
  net.prim["c2_bd"].execute(
      s, {{DNNL_ARG_DIFF_DST, d_a2}, {DNNL_ARG_WEIGHTS, p.c2_w}, {DNNL_ARG_DIFF_SRC, d_h1}});
  memory d_a1(net.p1_b.diff_src_desc(), eng);
  net.prim["p1_b"].execute(
      s, {{DNNL_ARG_DIFF_DST, d_h1}, {DNNL_ARG_WORKSPACE, a["ws1"]}, {DNNL_ARG_DIFF_SRC, d_a1}});
  net.prim["r1_b"].execute(s,
                           {{DNNL_ARG_DST, a["a1"]}, {DNNL_ARG_DIFF_DST, d_a1}, {DNNL_ARG_DIFF_SRC, d_a1}});
  memory d_c1_w(net.c1_bw.diff_weights_desc(), eng), d_c1_b(net.c1_bw.diff_bias_desc(), eng);
  net.prim["c1_bw"].execute(s, {{DNNL_ARG_SRC, net.input},
                                {DNNL_ARG_DIFF_DST, d_a1},
                                {DNNL_ARG_DIFF_WEIGHTS, d_c1_w},
                                {DNNL_ARG_DIFF_BIAS, d_c1_b}});
  const memory* grads[] = {&d_c1_w, &d_c1_b, &d_c2_w, &d_c2_b, &d_fc_w, &d_fc_b};
  const memory* weights[] = {&p.c1_w, &p.c1_b, &p.c2_w, &p.c2_b, &p.fc_w, &p.fc_b};
  for (std::size_t i = 0; i < sgd.sums.size(); ++i) {
    sgd.sums[i].execute(s, {{DNNL_ARG_MULTIPLE_SRC, *weights[i]},
                            {DNNL_ARG_MULTIPLE_SRC + 1, *grads[i]},
                            {DNNL_ARG_DST, *weights[i]}});
  }
  s.wait();
  return loss;
}

// FNV-1a over the parameters' bits.
std::uint64_t checksum(const Params& p) {
  std::uint64_t h = 1469598103934665603ULL;
  for (const memory* m : {&p.c1_w, &p.c1_b, &p.c2_w, &p.c2_b, &p.fc_w, &p.fc_b}) {
    const auto* bytes = static_cast<const unsigned char*>(m->get_data_handle());
    for (std::size_t k = 0; k < m->get_desc().get_size(); ++k) h = (h ^ bytes[k]) * 1099511628211ULL;
  }
  return h;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    int* target = flag == "--epochs"   ? &o.epochs
                  : flag == "--train"  ? &o.train
                  : flag == "--batch"  ? &o.batch
                  : flag == "--test"   ? &o.test
                  : flag == "--beside" ? &o.beside
                                       : nullptr;
    char* end = nullptr;
    const long value = i + 1 < argc ? std::strtol(argv[i + 1], &end, 10) : 0;
    if (target == nullptr || end == nullptr || *end != '\0' || value <= 0 || value > 1000000) {
      std::fprintf(
          stderr,
          "plain_cnn: bad argument '%s'; usage: plain_cnn [--epochs N] [--train N] [--batch N] [--test N] "
          "[--beside N]\n",
          argv[i]);
      std::exit(2);
    }
    *target = static_cast<int>(value);
    ++i;
  }
  return o;
}

// --beside: convolutions on a thread of their own, over and over until `done` (at least once), as a
// program with a second oneDNN thread (an evaluation, another model) runs them beside the training
// loop; the output's checksum is the same every round, so the run's output does not depend on how
// many ran.
std::uint64_t convolve_beside(dnnl::engine& eng, int batch, const std::atomic<bool>& done) {
  dnnl::stream s(eng);
  const memory::desc src_md({batch, kC1, kHalf, kHalf}, dt::f32, tag::nchw);
  const memory::desc w_md({kC2, kC1, 3, 3}, dt::f32, tag::oihw);
  const memory::desc dst_md({batch, kC2, kHalf, kHalf}, dt::f32, tag::nchw);
  const dnnl::convolution_forward::primitive_desc pd(
      dnnl::convolution_forward::desc(prop_kind::forward_inference, algorithm::convolution_direct, src_md,
                                      w_md, dst_md, {1, 1}, {1, 1}, {1, 1}),
      eng);
  memory src(pd.src_desc(), eng), w(pd.weights_desc(), eng), dst(pd.dst_desc(), eng);
  Lcg rng{7};
  for (memory* m : {&src, &w}) {
    auto* f = static_cast<float*>(m->get_data_handle());
    for (std::size_t k = 0; k < m->get_desc().get_size() / sizeof(float); ++k) f[k] = rng.uniform() - 0.5F;
  }
  const dnnl::convolution_forward conv(pd);
  int rounds = 0;
  while (rounds == 0 || !done.load()) {
    conv.execute(s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, dst}});
    s.wait();
    ++rounds;
  }
  std::uint64_t h = 1469598103934665603ULL;
  const auto* bytes = static_cast<const unsigned char*>(dst.get_data_handle());
  for (std::size_t k = 0; k < dst.get_desc().get_size(); ++k) h = (h ^ bytes[k]) * 1099511628211ULL;
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  std::atomic<bool> done{false};
  std::uint64_t beside_checksum = 0;
  std::thread beside;
  if (o.beside > 0) beside = std::thread([&] { beside_checksum = convolve_beside(eng, o.beside, done); });
  dnnl::stream s(eng);
  const Params params = make_params(eng);
  const Sgd sgd(eng, params);
  std::map<int, Net> train_nets;  // by batch size: the last batch of an epoch may be smaller
  Net test_net = make_net(eng, o.test, false);
  std::vector<double> step_ms;
  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    double loss = 0;
    int correct = 0, batches = 0;
    for (int first = 0; first < o.train; first += o.batch) {
      const int n = std::min(o.batch, o.train - first);
      auto it = train_nets.find(n);
      if (it == train_nets.end()) it = train_nets.emplace(n, make_net(eng, n, true)).first;
      const auto start = std::chrono::steady_clock::now();
      loss += train_step(it->second, params, sgd, eng, s, first, &correct);
      const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
      if (n == o.batch) step_ms.push_back(took.count());
      ++batches;
    }
    std::map<std::string, memory> a;
    const std::vector<int> labels = fill_batch(test_net.input, 1000000, o.test);
    int test_correct = 0;
    const double test_loss =
        softmax_xent(forward(test_net, params, eng, s, a), labels, nullptr, &test_correct);
    std::printf("epoch %d: train loss %.9g accuracy %d/%d; test loss %.9g accuracy %d/%d\n", epoch,
                loss / batches, correct, o.train, test_loss, test_correct, o.test);
  }
  std::printf("parameters checksum %016llx\n", static_cast<unsigned long long>(checksum(params)));
  if (beside.joinable()) {
    done = true;
    beside.join();
    std::printf("beside: convolutions' checksum %016llx\n", static_cast<unsigned long long>(beside_checksum));
  }
  if (step_ms.empty()) return 0;
  std::nth_element(step_ms.begin(), step_ms.begin() + static_cast<std::ptrdiff_t>(step_ms.size() / 2),
                   step_ms.end());
  std::fprintf(stderr, "plain_cnn: median step %.3f ms over %zu steps of batch %d\n",
               step_ms[step_ms.size() / 2], step_ms.size(), o.batch);
  return 0;
}
