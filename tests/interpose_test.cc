// The interposer's logic without the interposer: the argument table against oneDNN's own counts
// on real primitives of every kind the table names, and the step detector on key streams with a
// setup prefix, repetitions inside a step, steps of another kind, a loop that changes, and a hint.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>
#include <oneapi/dnnl/dnnl.hpp>

#include "tensortier/interpose/arg_table.h"
#include "tensortier/interpose/primitive_info.h"
#include "tensortier/interpose/step_detector.h"

namespace tensortier::interpose {
namespace {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;
using tag = memory::format_tag;

memory::desc md(const memory::dims& dims, tag t = tag::nchw) {
  return {dims, memory::data_type::f32, t};
}

TEST(ArgTable, UsesFollowTheArgumentAndThePrimitive) {
  PrimitiveTraits conv{dnnl_convolution, dnnl_forward_training, false, false};
  EXPECT_EQ(classify(conv, DNNL_ARG_SRC), ArgUse::kRead);
  EXPECT_EQ(classify(conv, DNNL_ARG_WEIGHTS), ArgUse::kRead);
  EXPECT_EQ(classify(conv, DNNL_ARG_BIAS), ArgUse::kRead);
  EXPECT_EQ(classify(conv, DNNL_ARG_DST), ArgUse::kWrite);
  EXPECT_EQ(classify(conv, DNNL_ARG_SCRATCHPAD), ArgUse::kWrite);
  EXPECT_EQ(classify(conv, DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1), ArgUse::kRead);
  conv.dst_summed = true;
  EXPECT_EQ(classify(conv, DNNL_ARG_DST), ArgUse::kReadWrite) << "a sum post-op reads dst";
  const PrimitiveTraits eltwise_bwd{dnnl_eltwise, dnnl_backward_data, false, false};
  EXPECT_EQ(classify(eltwise_bwd, DNNL_ARG_DST), ArgUse::kRead) << "use_dst_for_bwd reads forward's output";
  EXPECT_EQ(classify(eltwise_bwd, DNNL_ARG_DIFF_DST), ArgUse::kRead);
  EXPECT_EQ(classify(eltwise_bwd, DNNL_ARG_DIFF_SRC), ArgUse::kWrite);
  const PrimitiveTraits pool_fwd{dnnl_pooling_v2, dnnl_forward_training, false, false};
  const PrimitiveTraits pool_bwd{dnnl_pooling_v2, dnnl_backward_data, false, false};
  EXPECT_EQ(classify(pool_fwd, DNNL_ARG_WORKSPACE), ArgUse::kWrite);
  EXPECT_EQ(classify(pool_bwd, DNNL_ARG_WORKSPACE), ArgUse::kRead);
  PrimitiveTraits bnorm{dnnl_batch_normalization, dnnl_forward_training, false, false};
  EXPECT_EQ(classify(bnorm, DNNL_ARG_MEAN), ArgUse::kWrite);
  bnorm.global_stats = true;
  EXPECT_EQ(classify(bnorm, DNNL_ARG_VARIANCE), ArgUse::kRead);
  const PrimitiveTraits rnn_bwd{dnnl_rnn, dnnl_backward, false, false};
  EXPECT_EQ(classify(rnn_bwd, DNNL_ARG_DIFF_WEIGHTS_LAYER), ArgUse::kReadWrite) << "RNN backward accumulates";
  const PrimitiveTraits sum{dnnl_sum, dnnl_prop_kind_undef, false, false};
  EXPECT_EQ(classify(sum, DNNL_ARG_MULTIPLE_SRC + 3), ArgUse::kRead);
  EXPECT_EQ(classify(sum, DNNL_ARG_MULTIPLE_DST + 1), ArgUse::kWrite);
  bool known = true;
  EXPECT_EQ(classify(sum, 500, &known), ArgUse::kReadWrite);
  EXPECT_FALSE(known) << "an id the table does not know is read and written";
  EXPECT_EQ(classify(sum, DNNL_ARG_WORKSPACE, &known), ArgUse::kReadWrite);
  EXPECT_FALSE(known) << "a workspace of a primitive without a propagation kind";
}

TEST(ArgTable, CountsAgreeOrSayWhy) {
  const PrimitiveTraits conv{dnnl_convolution, dnnl_forward_training, false, false};
  const std::vector<int> used = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST,
                                 DNNL_ARG_SCRATCHPAD};
  EXPECT_EQ(check_counts(conv, used, 3, 1), "");
  EXPECT_NE(check_counts(conv, used, 2, 1), "")
      << "oneDNN counting two inputs disagrees with the table's three";
  const std::vector<int> unknown = {DNNL_ARG_SRC, 500};
  EXPECT_NE(check_counts(conv, unknown, 2, 0).find("500"), std::string::npos);
}

// Every kind the table names, made by oneDNN: the table finds oneDNN's own input and output counts
// over the arguments each primitive uses.
TEST(ArgTable, AgreesWithOneDnnOnRealPrimitives) {
  const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  const auto x = md({2, 3, 8, 8}), y = md({2, 4, 8, 8}), w = md({4, 3, 3, 3}, tag::oihw), b = md({4}, tag::x);
  const auto p = md({2, 3, 4, 4});
  const memory::dims s1 = {1, 1}, s2 = {2, 2}, pad = {1, 1}, none = {0, 0};
  const auto direct = algorithm::convolution_direct;
  const dnnl::convolution_forward::primitive_desc conv(
      {prop_kind::forward_training, direct, x, w, b, y, s1, pad, pad}, eng);
  dnnl::primitive_attr summed;
  dnnl::post_ops ops;
  ops.append_sum(1.0F);
  summed.set_post_ops(ops);
  const dnnl::pooling_forward::primitive_desc pool(
      {prop_kind::forward_training, algorithm::pooling_max, x, p, s2, s2, none, none}, eng);
  const dnnl::eltwise_forward::primitive_desc relu(
      {prop_kind::forward_training, algorithm::eltwise_relu_use_dst_for_bwd, x, 0.0F}, eng);
  const dnnl::batch_normalization_forward::primitive_desc bn(
      {prop_kind::forward_training, x, 1e-5F, dnnl::normalization_flags::use_scale_shift}, eng);
  const std::vector<dnnl::primitive> prims = {
      dnnl::convolution_forward(conv),
      dnnl::convolution_forward(dnnl::convolution_forward::primitive_desc(
          {prop_kind::forward_inference, direct, x, w, b, y, s1, pad, pad}, summed, eng)),
      dnnl::convolution_backward_data({{direct, x, w, y, s1, pad, pad}, eng, conv}),
      dnnl::convolution_backward_weights({{direct, x, w, b, y, s1, pad, pad}, eng, conv}),
      dnnl::pooling_forward(pool),
      dnnl::pooling_backward({{algorithm::pooling_max, x, p, s2, s2, none, none}, eng, pool}),
      dnnl::eltwise_forward(relu),
      dnnl::eltwise_backward({{algorithm::eltwise_relu_use_dst_for_bwd, x, x, 0.0F}, eng, relu}),
      dnnl::batch_normalization_forward(bn),
      dnnl::batch_normalization_forward(dnnl::batch_normalization_forward::primitive_desc(
          {prop_kind::forward_inference, x, 1e-5F, dnnl::normalization_flags::use_global_stats}, eng)),
      dnnl::batch_normalization_backward(
          {{prop_kind::backward, x, x, 1e-5F, dnnl::normalization_flags::use_scale_shift}, eng, bn}),
      dnnl::inner_product_forward({{prop_kind::forward_training, x, md({5, 3, 8, 8}, tag::oihw),
                                    md({5}, tag::x), md({2, 5}, tag::nc)},
                                   eng}),
      dnnl::sum(dnnl::sum::primitive_desc(x, {1.0F, -0.5F}, {x, x}, eng)),
      dnnl::reorder(dnnl::reorder::primitive_desc(eng, x, eng, md({2, 3, 8, 8}, tag::nhwc))),
      dnnl::binary({{algorithm::binary_add, x, x, x}, eng}),
      dnnl::softmax_forward({{prop_kind::forward_training, md({2, 5}, tag::nc), 1}, eng}),
      dnnl::concat(dnnl::concat::primitive_desc(1, {x, x}, eng)),
  };
  for (const dnnl::primitive& prim : prims) {
    const PrimitiveInfo info = describe(prim.get());
    EXPECT_EQ(info.mismatch, "") << info.name;
    EXPECT_FALSE(info.uses.empty()) << info.name;
  }
  const PrimitiveInfo summed_conv = describe(prims[1].get());
  EXPECT_EQ(summed_conv.uses.at(DNNL_ARG_DST), ArgUse::kReadWrite);
  EXPECT_EQ(describe(prims[8].get()).uses.at(DNNL_ARG_MEAN), ArgUse::kWrite);
  EXPECT_FALSE(describe(prims[8].get()).uses.contains(DNNL_ARG_SCALE)) << "use_scale_shift: one SCALE_SHIFT";
  EXPECT_EQ(describe(prims[10].get()).uses.at(DNNL_ARG_DIFF_SCALE_SHIFT), ArgUse::kWrite);
  EXPECT_EQ(describe(prims[9].get()).uses.at(DNNL_ARG_MEAN), ArgUse::kRead) << "global statistics are read";
  EXPECT_EQ(describe(prims[0].get()).name, "convolution:forward_training");
}

// Feeds keys; returns the decisions.
std::vector<StepDecision> feed(StepDetector& d, const std::vector<std::uint64_t>& keys) {
  std::vector<StepDecision> out;
  for (std::uint64_t k : keys) out.push_back(d.next(k));
  return out;
}

std::vector<std::uint64_t> repeat(const std::vector<std::uint64_t>& body, int times) {
  std::vector<std::uint64_t> out;
  for (int i = 0; i < times; ++i) out.insert(out.end(), body.begin(), body.end());
  return out;
}

// Counts of each decision over a run.
struct Tally {
  int begins = 0, ends = 0, marked = 0;
};
Tally tally(const std::vector<StepDecision>& ds) {
  Tally t;
  for (const StepDecision& d : ds) {
    t.begins += d.begin_before + d.begin_after;
    t.ends += d.end_before + d.end_after;
    t.marked += d.marked;
  }
  return t;
}

TEST(StepDetector, FindsTheLoopAfterASetupPrefixAndAStepInsideItThatRepeats) {
  // Setup 9, 9; the loop's body starts with a pair that repeats (1 1), then 2 3 4.
  StepDetector d;
  std::vector<std::uint64_t> keys = {9, 9};
  const std::vector<std::uint64_t> body = {1, 1, 2, 3, 4};
  const std::vector<std::uint64_t> loop = repeat(body, 10);
  keys.insert(keys.end(), loop.begin(), loop.end());
  const std::vector<StepDecision> ds = feed(d, keys);
  EXPECT_EQ(d.state(), StepDetector::State::kTracking);
  EXPECT_EQ(d.period(), 5u) << "the pair 1 1 is not the step";
  // Found over three repetitions, verified over a fourth: the first step begins after it, at an
  // iteration's start, and every iteration from then on is one step.
  ASSERT_EQ((d.tracking_from() - 2) % 5, 0u) << "steps begin where an iteration begins";
  const std::size_t from = d.tracking_from();
  EXPECT_TRUE(ds[from - 1].begin_after);
  for (std::size_t i = 0; i < from; ++i) EXPECT_FALSE(ds[i].marked) << i;
  for (std::size_t i = from; i < ds.size(); ++i) {
    EXPECT_TRUE(ds[i].marked) << i;
    EXPECT_EQ(ds[i].end_after, (i - from + 1) % 5 == 0) << i;
  }
  EXPECT_EQ(d.other_steps(), 0u);
}

TEST(StepDetector, AStepOfAnotherKindEndsWhereTheLoopComesBack) {
  StepDetector d;
  const std::vector<std::uint64_t> body = {1, 2, 3, 4};
  feed(d, repeat(body, 5));
  ASSERT_EQ(d.state(), StepDetector::State::kTracking);
  // An evaluation pass (7 7 7) after a step, then the loop again.
  const std::vector<StepDecision> eval = feed(d, {7, 7, 7});
  for (const StepDecision& s : eval) EXPECT_TRUE(s.marked) << "the evaluation runs in a step of its own";
  const std::vector<StepDecision> back = feed(d, body);
  EXPECT_TRUE(back[0].end_before && back[0].begin_before) << "the loop's first key ends the other step";
  EXPECT_TRUE(back[3].end_after);
  EXPECT_EQ(d.other_steps(), 1u);
  // A smaller last batch: the same kinds, other sizes (other keys) for a whole iteration.
  feed(d, {11, 12, 13, 14});
  const std::vector<StepDecision> again = feed(d, body);
  EXPECT_TRUE(again[0].end_before);
  EXPECT_EQ(d.other_steps(), 2u);
  EXPECT_EQ(d.state(), StepDetector::State::kTracking);
}

TEST(StepDetector, SearchesAgainWhenTheLoopChangesAndGivesUpWithoutOne) {
  StepDetector d;
  feed(d, repeat({1, 2, 3}, 5));
  ASSERT_EQ(d.period(), 3u);
  // A new loop (batch size changed for good): after kLostSteps steps of another kind, a new search.
  feed(d, repeat({5, 6, 7, 8}, 4 * StepDetector::kLostSteps));
  EXPECT_EQ(d.searches(), 1u);
  feed(d, repeat({5, 6, 7, 8}, 5));
  EXPECT_EQ(d.state(), StepDetector::State::kTracking);
  EXPECT_EQ(d.period(), 4u);

  StepDetector never;
  std::vector<std::uint64_t> distinct(StepDetector::kHistory + 10);
  for (std::size_t i = 0; i < distinct.size(); ++i) distinct[i] = i;
  const Tally t = tally(feed(never, distinct));
  EXPECT_EQ(never.state(), StepDetector::State::kGaveUp);
  EXPECT_EQ(t.marked, 0) << "nothing is marked without a step";
  EXPECT_EQ(t.begins, 0);
}

TEST(StepDetector, AHintReplacesTheSearch) {
  StepDetector d(StepHint{4, 2});
  const std::vector<StepDecision> ds = feed(d, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  EXPECT_FALSE(ds[0].marked);
  EXPECT_TRUE(ds[1].begin_after) << "the first step begins after the offset";
  EXPECT_TRUE(ds[2].marked);
  EXPECT_TRUE(ds[5].end_after && ds[5].begin_after);
  EXPECT_TRUE(ds[9].end_after);
  const Tally t = tally(ds);
  EXPECT_EQ(t.marked, 8);
  EXPECT_EQ(t.ends, 2);
  StepDetector at_once(StepHint{3, 0});
  EXPECT_TRUE(at_once.next(1).begin_before);
}

}  // namespace
}  // namespace tensortier::interpose
