// Moving objects under a training engine: random moves between every two layers among all the
// tier kinds this machine has (dram, numa:0, emulated move in place; pmem on a directory gives a
// new address) train bit-identically to no moves (LeNet-5, ResNet-18), and emulated slow memory
// costs a whole training step what the model predicts.
#include <algorithm>
#include <cmath>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "stats.h"  // bench/: median
#include "tensortier/dnn/data.h"
#include "tensortier/dnn/models.h"
#include "test_util.h"

namespace tensortier::dnn {
namespace {

// Moves every live object to a random tier after every layer (moves during a profiled step are
// refused by the runtime, and small objects cannot go to a heap tier: those are skipped).
class Chaos final : public StepObserver {
 public:
  Chaos(Runtime& rt, unsigned seed) : rt_(rt), rng_(seed) {}
  void on_layer_end(const LayerEndEvent&) override {
    for (const ObjectInfo& o : rt_.objects()) {
      const auto to = static_cast<TierIndex>(rng_() % rt_.tier_count());
      auto moved = rt_.move(o.id, to);
      if (moved && moved->moved) ++moves;
      if (!moved && moved.status().code() != StatusCode::kUnavailable &&
          moved.status().code() != StatusCode::kFailedPrecondition) {
        ADD_FAILURE() << moved.status().to_string();
      }
    }
  }
  std::uint64_t moves = 0;

 private:
  Runtime& rt_;
  std::mt19937 rng_;
};

struct TrainRun {
  std::vector<double> losses;
  std::vector<float> params;
  std::uint64_t moves = 0;
  std::uint64_t relocations = 0;
};

TrainRun train(const std::string& model, const std::string& spec, dnnl::memory::dims input, int width,
               bool chaos) {
  TrainRun out;
  RuntimeOptions options(spec);
  auto rt = Runtime::create(options);
  EXPECT_TRUE(rt) << rt.status().to_string();
  if (!rt) return out;
  Engine engine(*rt.value());
  auto net = make_model(model, {4, width});
  EXPECT_TRUE(net) << net.status().to_string();
  EXPECT_TRUE(net.value()->build(engine, input, 42).is_ok());
  Dataset data = synthetic_dataset(static_cast<std::size_t>(input[0]) * 3, static_cast<int>(input[1]),
                                   static_cast<int>(input[2]), static_cast<int>(input[3]), 4, 7);
  BatchIterator it(data, static_cast<std::size_t>(input[0]), 3);
  Batch batch;
  Chaos mover(*rt.value(), 11);
  if (chaos) {
    EXPECT_TRUE(rt.value()->add_observer(&mover).is_ok());
  }
  for (int step = 0; step < 4; ++step) {
    EXPECT_TRUE(it.next(engine, batch).is_ok());
    EXPECT_TRUE(rt.value()->step_begin().is_ok());
    auto r = net.value()->train_step(engine, batch, {0.05F, 0.9F, 1e-4F});
    EXPECT_TRUE(r) << r.status().to_string();
    EXPECT_TRUE(rt.value()->step_end().is_ok());
    out.losses.push_back(r ? r->loss : -1);
  }
  if (chaos) rt.value()->remove_observer(&mover);
  for (auto& [name, p] : net.value()->params())
    out.params.insert(out.params.end(), p->value.data(), p->value.data() + p->value.elements());
  out.moves = mover.moves;
  out.relocations = rt.value()->relocations();
  return out;
}

class ChaosTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ChaosTest, RandomMovesBetweenEveryTwoLayersTrainBitIdentically) {
  const std::string model = GetParam();
  const dnnl::memory::dims input =
      model == "lenet5" ? dnnl::memory::dims{4, 1, 28, 28} : dnnl::memory::dims{3, 3, 16, 16};
  const int width = model == "lenet5" ? 6 : 4;
  const TrainRun still = train(model, "fast=dram:1GiB", input, width, false);
  testing::TempDir dir;
  const TrainRun moved = train(
      model,
      fmt::format("fast=dram:1GiB,numa=numa:0:1GiB,slow=emulated:cxl:1GiB,heap=pmem:{}:1GiB", dir.path()),
      input, width, true);
  EXPECT_GT(moved.moves, 1000u);
  EXPECT_GT(moved.relocations, 100u);  // objects really changed address (pmem), not only in place
  EXPECT_EQ(still.losses, moved.losses);
  EXPECT_EQ(still.params, moved.params);
  EXPECT_LT(still.losses.back(), still.losses.front() * 1.5);  // a real run, not NaN
}

INSTANTIATE_TEST_SUITE_P(Models, ChaosTest, ::testing::Values("lenet5", "resnet18"));

// Sums the charge the model predicts from each layer's slow-tier bytes: the additive charge, or
// more where the layer's own work took less than its slow traffic needs (a layer whose bytes
// were in cache: the slow tier still cannot deliver them faster than its bandwidth).
class Predictor final : public StepObserver {
 public:
  explicit Predictor(const CostModel& model) : model_(model) {}
  void on_step_begin(std::uint64_t) override { predicted_ns = 0; }
  void on_layer_end(const LayerEndEvent& e) override {
    const std::uint64_t additive = model_.layer_charge_ns(e.slow_bytes_read, e.slow_bytes_written);
    if (additive == 0) return;
    const std::uint64_t own_ns = e.duration_ns - e.emulated_charge_ns;
    const std::uint64_t traffic = model_.slow_traffic_ns(e.slow_bytes_read, e.slow_bytes_written);
    predicted_ns += std::max(additive, traffic > own_ns ? traffic - own_ns : 0);
  }
  std::uint64_t predicted_ns = 0;

 private:
  CostModel model_;
};

// ResNet-18 on one spec's tiers, stepped one step at a time.
struct Stepper {
  explicit Stepper(const std::string& spec) {
    RuntimeOptions options(spec);
    options.profile.enabled = false;
    rt = Runtime::create(options).value();
    engine = std::make_unique<Engine>(*rt);
    net = make_model("resnet18", {10, 16}).value();
    EXPECT_TRUE(net->build(*engine, {8, 3, 32, 32}, 1).is_ok());
    data = synthetic_dataset(8, 3, 32, 32, 10, 3);
    BatchIterator it(data, 8, 1);
    EXPECT_TRUE(it.next(*engine, batch).is_ok());
    const CostModel* model = rt->tier(static_cast<TierIndex>(rt->tier_count() - 1)).cost_model();
    predictor = std::make_unique<Predictor>(
        model != nullptr ? *model : CostModel(find_preset("cxl").value(), FastBandwidth{1, 1, 1, ""}));
    EXPECT_TRUE(rt->add_observer(predictor.get()).is_ok());
  }
  ~Stepper() { rt->remove_observer(predictor.get()); }
  Stepper(const Stepper&) = delete;
  Stepper& operator=(const Stepper&) = delete;
  // One training step; its wall time in ns.
  double step() {
    EXPECT_TRUE(rt->step_begin().is_ok());
    const std::uint64_t start = steady_now_ns();
    EXPECT_TRUE(net->train_step(*engine, batch, {0.01F, 0.9F, 0.0F}));
    const auto ns = static_cast<double>(steady_now_ns() - start);
    EXPECT_TRUE(rt->step_end().is_ok());
    return ns;
  }
  std::unique_ptr<Runtime> rt;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Network> net;
  Dataset data;
  Batch batch;
  std::unique_ptr<Predictor> predictor;
};

using bench::median;

// Fast-only and slow-only steps interleaved in one process (machine noise falls on both), median
// of 7 each after a warm-up step.
TEST(Emulation, SlowOnlyOverFastOnlyMatchesTheModelsPrediction) {
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "a timing check: under a sanitizer the layers' own time is too slow and noisy to compare";
#endif
  Stepper fast("fast=dram:2GiB");
  Stepper slow("slow=emulated:optane-server:2GiB");
  // Up to six rounds of 7 steps each: a round that a neighbour on this shared 2-core machine
  // disturbed is measured again (a model that is off fails all six). A disturbance inflates the
  // slow steps more than the fast ones: each of their ~250 emulated waits sleeps, and on a
  // busy machine a sleeper can wake late. One fresh-machine run saw three disturbed rounds in a row.
  // The slow side has more room for that reason: the measured ratio may be from 0.9 to 1.6 times
  // the predicted one. On 2026-12-03 this VM host ran the slow steps' layers, between their
  // sleeps, 2.5-3.7 times as long as the fast steps' for half an hour (every round 1.24-1.46x the
  // prediction, on an idle machine), where it had been within 10% an hour before. What the check
  // is for holds either way: a charge not applied falls below 0.9, and one applied twice lands near
  // twice the prediction, above 1.6.
  double predicted_ratio = 0, measured_ratio = 0, predicted_ns = 0;
  std::vector<double> fast_ns, slow_ns;
  for (int round = 0; round < 6; ++round) {
    fast_ns.clear();
    slow_ns.clear();
    for (int step = 0; step < 8; ++step) {
      const double f = fast.step();
      const double s = slow.step();
      if (step == 0) continue;
      fast_ns.push_back(f);
      slow_ns.push_back(s);
    }
    predicted_ns = static_cast<double>(slow.predictor->predicted_ns);
    predicted_ratio = (median(fast_ns) + predicted_ns) / median(fast_ns);
    measured_ratio = median(slow_ns) / median(fast_ns);
    if (measured_ratio >= 0.9 * predicted_ratio && measured_ratio <= 1.6 * predicted_ratio) break;
  }
  EXPECT_EQ(fast.predictor->predicted_ns, 0u);
  ASSERT_GT(predicted_ns, 0.0);
  EXPECT_GE(measured_ratio, 0.9 * predicted_ratio) << "the emulated charge is not all applied";
  EXPECT_LE(measured_ratio, 1.6 * predicted_ratio)
      << "fast " << median(fast_ns) / 1e6 << " ms, slow " << median(slow_ns) / 1e6 << " ms, predicted charge "
      << predicted_ns / 1e6 << " ms, charged (waits, last step) "
      << static_cast<double>(slow.rt->stats().last_step_emulated_charge_ns) / 1e6 << " ms";
  std::printf(
      "ResNet-18 (width 16, batch 8, 32x32), emulated optane-server: slow-only / fast-only %.2fx measured, "
      "%.2fx predicted\n",
      measured_ratio, predicted_ratio);
}

}  // namespace
}  // namespace tensortier::dnn
