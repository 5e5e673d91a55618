// --model SPEC for analyze: the estimate it builds and what the comparison counts.
#include "analysis/explain/model_gap.h"
#include "analysis/explain/model_job.h"

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "estimator/model_presets.h"
#include "estimator/training_memory.h"
#include "tests/testing/status_matchers.h"

namespace fragscope {
namespace {

namespace est = ::fragscope::estimator;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(ModelGapTest, TorchAutocastSpecMatchesTheEstimator) {
  ASSERT_OK_AND_ASSIGN(
      est::MemoryEstimate from_spec,
      EstimateFromModelSpec("gpt2-small:seq=512,micro_batch=8,flash=1,activations=torch-autocast"));
  est::TrainingConfig config;
  config.seq_len = 512;
  config.micro_batch = 8;
  config.flash_attention = true;
  config.activation_model = est::ActivationModel::kTorchAutocast;
  ASSERT_OK_AND_ASSIGN(est::MemoryEstimate direct,
                       est::EstimateTraining(*est::FindModelPreset("gpt2-small"), config));
  EXPECT_DOUBLE_EQ(from_spec.DeviceBytes(), direct.DeviceBytes());
  ASSERT_NE(from_spec.Find("loss_backward"), nullptr);
}

TEST(ModelGapTest, DropoutKeyAndBadActivationModel) {
  ASSERT_OK_AND_ASSIGN(est::MemoryEstimate with, EstimateFromModelSpec("llama-2-7b:seq=1024"));
  ASSERT_OK_AND_ASSIGN(est::MemoryEstimate without,
                       EstimateFromModelSpec("llama-2-7b:seq=1024,dropout=0"));
  EXPECT_LT(without.Find("activations")->value, with.Find("activations")->value);
  absl::StatusOr<est::MemoryEstimate> bad = EstimateFromModelSpec("gpt2:activations=eager");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("activations: unknown activation model 'eager'"));
}

TEST(ModelGapTest, TermsOffThePeakAreNotTheoreticalBytes) {
  ASSERT_OK_AND_ASSIGN(
      est::MemoryEstimate estimate,
      EstimateFromModelSpec("gpt2-small:seq=512,micro_batch=8,flash=1,activations=torch-autocast"));
  const ModelGap gap = CompareWithModel(estimate, LayoutSummary{});
  double expected = 0;
  for (const char* key : {"weights", "master_weights", "optimizer_states", "activations",
                          "activations_embedding", "activations_output", "loss_backward"}) {
    expected += estimate.Find(key)->value;
  }
  EXPECT_DOUBLE_EQ(gap.theoretical_bytes, expected) << "no gradients, no workspace";
}

TEST(ModelGapTest, AutocastWeightsAreTheFp32Parameters) {
  ASSERT_OK_AND_ASSIGN(
      est::MemoryEstimate estimate,
      EstimateFromModelSpec("gpt2-small:seq=512,micro_batch=8,flash=1,activations=torch-autocast"));
  const ModelGap roomy = CompareWithModel(estimate, LayoutSummary{});
  for (const TermGap& t : roomy.terms) {
    // The fp32 parameters (allocated at init) are "weights"; the 16-bit copies are forward work.
    if (t.category == "weights") {
      EXPECT_DOUBLE_EQ(t.estimated_bytes, estimate.Find("master_weights")->value);
    }
  }
}

// A layout of live blocks: (size, marker phase) each.
LayoutSummary Live(const std::vector<std::pair<double, std::string>>& blocks) {
  SegmentMap map;
  for (const auto& [bytes, phase] : blocks) {
    MapBlock b;
    b.size = static_cast<uint64_t>(bytes);
    b.state = MapBlockState::kAllocated;
    b.phase = phase;
    map.blocks.push_back(b);
  }
  LayoutSummary layout;
  layout.maps.push_back(map);
  return layout;
}

TEST(ModelGapTest, AGapIsPlacedOnlyWhenAllocatedExceedsTheFootprint) {
  ASSERT_OK_AND_ASSIGN(
      est::MemoryEstimate estimate,
      EstimateFromModelSpec("gpt2-small:seq=512,micro_batch=8,flash=1,activations=torch-autocast"));
  const double weights = estimate.Find("master_weights")->value;
  // Stopped early in the forward pass: weights a MiB over their estimate, little else.
  const ModelGap early = CompareWithModel(
      estimate, Live({{weights + (1 << 20), "init"}, {64 << 20, "step 0 / forward"}}));
  EXPECT_LT(early.allocated_bytes, early.theoretical_bytes);
  EXPECT_EQ(early.likely_term, "");
  EXPECT_THAT(early.lines, Contains(HasSubstr("below the footprint")));
  EXPECT_THAT(early.lines, Not(Contains(HasSubstr("most likely sits"))));
  // Forward work far over its estimate: that is where the excess sits.
  const ModelGap over = CompareWithModel(
      estimate, Live({{weights, "init"}, {2 * early.theoretical_bytes, "step 0 / forward"}}));
  EXPECT_EQ(over.likely_term, "activations");
  EXPECT_THAT(over.lines, Contains(HasSubstr("most likely sits in activations")));
}

TEST(ModelGapTest, ATrainingKvCacheIsNamedWithItsFix) {
  ASSERT_OK_AND_ASSIGN(
      est::MemoryEstimate estimate,
      EstimateFromModelSpec("gpt2-small:seq=512,micro_batch=8,flash=1,activations=torch-autocast"));
  LayoutSummary layout = Live({{estimate.Find("master_weights")->value, "init"},
                               {2.0 * (1 << 30), "step 0 / forward"},
                               {64 << 20, "step 0 / forward"}});
  std::vector<MapBlock>& blocks = layout.maps[0].blocks;
  blocks[0].origin.role = AllocationRole::kWeights;
  blocks[1].origin.role = AllocationRole::kSavedActivations;
  blocks[2].origin.role = AllocationRole::kKvCache;
  const ModelGap gap = CompareWithModel(estimate, layout);
  ASSERT_TRUE(gap.by_role);
  bool found = false;
  for (const TermGap& t : gap.terms) {
    if (t.category != "kv_cache") continue;
    found = true;
    EXPECT_EQ(t.estimated_bytes, 0);
    EXPECT_EQ(t.measured_bytes, 64 << 20);
  }
  EXPECT_TRUE(found);
  EXPECT_THAT(gap.lines, Contains(HasSubstr("A KV cache of 64.00 MiB is live here")));
  EXPECT_THAT(gap.lines, Contains(HasSubstr("use_cache=False")));
  // No KV-cache block: no such line.
  blocks.pop_back();
  EXPECT_THAT(CompareWithModel(estimate, layout).lines, Not(Contains(HasSubstr("KV cache"))));
}

}  // namespace
}  // namespace fragscope
