// Inverse questions: every answer fits and the next value does not.
#include <ostream>

#include "gtest/gtest.h"
#include "tests/estimator/example_models.h"

#include "estimator/gpu_presets.h"
#include "estimator/inverse_search.h"
#include "estimator/model_presets.h"
#include "estimator/training_memory.h"

namespace fragscope::estimator {
namespace {

double TrainingBytes(const ModelSpec& spec, const TrainingConfig& config) {
  absl::StatusOr<MemoryEstimate> estimate = EstimateTraining(spec, config);
  EXPECT_TRUE(estimate.ok()) << estimate.status();
  return estimate->DeviceBytes();
}

// The README's example under ZeRO-3.
TrainingConfig Llama13bOnEight() {
  TrainingConfig config = ::fragscope::testing::ReadmeExampleTraining();
  config.zero_stage = 3;
  return config;
}

// A largest-value search of training and the setting it sizes.
struct TrainingSearch {
  const char* name;
  absl::StatusOr<int64_t> (*search)(const ModelSpec&, const TrainingConfig&, double);
  int64_t TrainingConfig::*setting;
};

void PrintTo(const TrainingSearch& search, std::ostream* os) { *os << search.name; }

class LargestTrainingValueTest : public ::testing::TestWithParam<TrainingSearch> {};

TEST_P(LargestTrainingValueTest, IsTight) {
  const TrainingSearch& p = GetParam();
  const ModelSpec spec = *FindModelPreset("llama-2-13b");
  const double capacity = FindGpuPreset("h100-80gb")->memory_bytes;
  TrainingConfig config = Llama13bOnEight();
  absl::StatusOr<int64_t> best = p.search(spec, config, capacity);
  ASSERT_TRUE(best.ok()) << best.status();
  ASSERT_GT(*best, 0);
  config.*p.setting = *best;
  EXPECT_LE(TrainingBytes(spec, config), capacity);
  config.*p.setting = *best + 1;
  EXPECT_GT(TrainingBytes(spec, config), capacity);
}

INSTANTIATE_TEST_SUITE_P(
    InverseSearchTest, LargestTrainingValueTest,
    ::testing::Values(TrainingSearch{"MicroBatch", LargestMicroBatch, &TrainingConfig::micro_batch},
                      TrainingSearch{"Sequence", LargestSequence, &TrainingConfig::seq_len}),
    [](const ::testing::TestParamInfo<TrainingSearch>& info) { return info.param.name; });

TEST(InverseSearchTest, ZeroWhenNothingFits) {
  TrainingConfig config;  // ZeRO-0: 18 B/param of 175 B parameters on one GPU
  absl::StatusOr<int64_t> best = LargestMicroBatch(*FindModelPreset("gpt-3-175b"), config,
                                                   FindGpuPreset("h100")->memory_bytes);
  ASSERT_TRUE(best.ok());
  EXPECT_EQ(*best, 0);
}

TEST(InverseSearchTest, SmallestDataParallelUnderZero3) {
  const ModelSpec spec = *FindModelPreset("llama-2-70b");
  const double capacity = FindGpuPreset("h100-80gb")->memory_bytes;
  TrainingConfig config;
  config.zero_stage = 3;
  config.seq_len = 4096;
  config.recompute = Recompute::kFull;
  absl::StatusOr<GpuCountResult> result =
      SmallestGpuCount(spec, config, capacity, ScaleDimension::kDataParallel);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_TRUE(result->found);
  EXPECT_LE(result->device_bytes, capacity);
  config.layout = result->layout;
  EXPECT_LE(TrainingBytes(spec, config), capacity);
  config.layout.dp -= 1;
  EXPECT_GT(TrainingBytes(spec, config), capacity);
}

TEST(InverseSearchTest, SmallestTensorParallelForInference) {
  const ModelSpec spec = *FindModelPreset("llama-2-70b");
  InferenceConfig config;
  absl::StatusOr<GpuCountResult> result = SmallestGpuCountForInference(
      spec, config, FindGpuPreset("a100-80gb")->memory_bytes, ScaleDimension::kTensorParallel);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_TRUE(result->found);
  EXPECT_EQ(result->layout.tp, 2);  // 138 GB of bf16 weights, x 1.2, over two 79.25 GiB GPUs
  EXPECT_FALSE(SmallestGpuCountForInference(spec, config, 1e9, ScaleDimension::kDataParallel).ok());
}

TEST(InverseSearchTest, LargestInferenceBatchAndContext) {
  const ModelSpec spec = *FindModelPreset("llama-3-8b");
  const double capacity = FindGpuPreset("rtx-4090")->memory_bytes;
  InferenceConfig config;
  absl::StatusOr<int64_t> batch = LargestInferenceBatch(spec, config, capacity);
  ASSERT_TRUE(batch.ok());
  absl::StatusOr<int64_t> context = LargestContext(spec, config, capacity);
  ASSERT_TRUE(context.ok());
  // What is left after weights, the 20 % line and the CUDA context, at 128 KiB per token.
  const double fixed = 8030261248.0 * 2 * 1.2 + kDefaultCudaContextBytes;
  EXPECT_EQ(*context, static_cast<int64_t>((capacity - fixed) / 131072));
  EXPECT_EQ(*batch, *context / 2048);
}

}  // namespace
}  // namespace fragscope::estimator
