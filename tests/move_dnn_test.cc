// Moving objects under a training engine: random moves between every two layers among all the
// tier kinds this machine has (dram, numa:0, emulated move in place; pmem on a directory gives a
// new address) train bit-identically to no moves (LeNet-5, ResNet-18), and emulated slow memory
// costs a whole training step what the model predicts.
#include <algorithm>
#include <cmath>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>

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

// Sums, over a step, the bytes its layers declare on the slow tier and the model's charge for them.
class Predictor final : public StepObserver {
 public:
  explicit Predictor(const CostModel& model) : model_(model) {}
  void on_step_begin(std::uint64_t) override { additive_ns = declared_bytes = 0; }
  void on_layer_end(const LayerEndEvent& e) override {
    additive_ns += model_.layer_charge_ns(e.slow_bytes_read, e.slow_bytes_written);
    declared_bytes += e.slow_bytes_read + e.slow_bytes_written;
  }
  std::uint64_t additive_ns = 0;     // the model's charge for the step's declared slow bytes
  std::uint64_t declared_bytes = 0;  // those bytes

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

// A slow-only ResNet-18 step is charged the model's price for every byte its layers declare on the
// emulated tier, and waits at least that long; fast-only's is charged nothing. (The measured
// slow-only over fast-only ratio against the model's prediction is a timing: bench_training with
// --tiers fast=dram:2GiB --tiers slow=emulated:optane-server:2GiB, docs/RESULTS.md.)
TEST(Emulation, SlowOnlyStepsAreChargedWhatTheModelPredictsForTheirBytes) {
  Stepper fast("fast=dram:2GiB");
  Stepper slow("slow=emulated:optane-server:2GiB");
  for (int step = 0; step < 3; ++step) {
    (void)fast.step();
    const std::uint64_t booked_before = slow.rt->stats().tier_emulated_charge_ns.at(0);
    (void)slow.step();
    const RuntimeStats stats = slow.rt->stats();
    EXPECT_EQ(stats.tier_emulated_charge_ns.at(0) - booked_before, slow.predictor->additive_ns)
        << "step " << step << ": the booked charge is the model's for the bytes the layers declared";
    EXPECT_GT(slow.predictor->additive_ns, 0u);
    EXPECT_GE(stats.last_step_emulated_charge_ns, slow.predictor->additive_ns)
        << "a charge is waited for in full (a wait lasts at least what it waits for)";
    EXPECT_EQ(stats.last_step_slow_bytes, slow.predictor->declared_bytes);
  }
  EXPECT_EQ(fast.rt->stats().emulated_charge_ns, 0u);
  EXPECT_EQ(fast.predictor->additive_ns, 0u);
}

}  // namespace
}  // namespace tensortier::dnn
