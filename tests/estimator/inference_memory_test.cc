// Inference: KV cache (reference 5 and 8.2), the 1.2x line, GPU presets and the roofline
// (llm-analysis's LLaMA-7B run, reference 8.2).
#include <cmath>
#include <cstdint>
#include <string>

#include "gtest/gtest.h"
#include "tests/estimator/example_models.h"

#include "estimator/gpu_presets.h"
#include "estimator/inference_memory.h"
#include "estimator/model_presets.h"
#include "estimator/roofline.h"
#include "estimator/units.h"

namespace fragscope::estimator {
namespace {

using ::fragscope::testing::BareModel;

TEST(InferenceMemoryTest, KvCacheBytesPerTokenOfReferenceSection5) {
  const ParallelLayout one;
  EXPECT_EQ(KvCacheBytesPerToken(*FindModelPreset("llama-2-7b"), DType::kFp16, one), 524288);
  EXPECT_EQ(KvCacheBytesPerToken(*FindModelPreset("llama-2-70b"), DType::kFp16, one), 327680);
  EXPECT_EQ(KvCacheBytesPerToken(*FindModelPreset("llama-3-8b"), DType::kFp16, one), 131072);
}

double KvGiB(const std::string& preset, int64_t context) {
  InferenceConfig config;
  config.kv_cache = DType::kFp16;
  config.context = context;
  absl::StatusOr<MemoryEstimate> estimate = EstimateInference(*FindModelPreset(preset), config);
  EXPECT_TRUE(estimate.ok()) << estimate.status();
  return estimate->Find("kv_cache")->value / kGiB;
}

TEST(InferenceMemoryTest, KvCacheSizesOfReferenceSection82) {
  EXPECT_DOUBLE_EQ(KvGiB("llama-2-7b", 4096), 2.0);
  EXPECT_DOUBLE_EQ(KvGiB("llama-2-70b", 4096), 1.25);
  EXPECT_DOUBLE_EQ(KvGiB("llama-3-8b", 8192), 1.0);
}

TEST(InferenceMemoryTest, TensorParallelBeyondKvHeadsReplicatesThem) {
  ParallelLayout layout;
  layout.tp = 16;
  const ModelSpec llama70 = *FindModelPreset("llama-2-70b");
  EXPECT_EQ(KvHeadsPerRank(llama70, layout), 1);
  layout.tp = 4;
  EXPECT_EQ(KvHeadsPerRank(llama70, layout), 2);
  EXPECT_EQ(KvCacheBytesPerToken(llama70, DType::kFp16, layout), 327680 / 4);
}

TEST(InferenceMemoryTest, OverheadRuleIsItsOwnLine) {
  InferenceConfig config;
  config.weights = DType::kFp16;
  config.context = 0;
  ModelSpec seventy;
  seventy.name = "70e9";
  seventy.parameter_count = 70000000000;
  absl::StatusOr<MemoryEstimate> estimate = EstimateInference(seventy, config);
  ASSERT_TRUE(estimate.ok()) << estimate.status();
  EXPECT_EQ(estimate->Find("weights")->value, 140e9);
  EXPECT_DOUBLE_EQ(estimate->Find("overhead_rule")->value, 28e9);
  EXPECT_EQ(estimate->Find("kv_cache"), nullptr);
  config.overhead_factor = 1.0;
  EXPECT_EQ(EstimateInference(seventy, config)->Find("overhead_rule")->value, 0);
}

TEST(InferenceMemoryTest, WeightDtypes) {
  const ModelSpec bare = BareModel(1000);
  InferenceConfig config;
  config.context = 0;
  for (const auto& [dtype, bytes] : {std::pair{DType::kFp32, 4000.0},
                                     {DType::kBf16, 2000.0},
                                     {DType::kInt8, 1000.0},
                                     {DType::kInt4, 500.0}}) {
    config.weights = dtype;
    EXPECT_EQ(EstimateInference(bare, config)->Find("weights")->value, bytes);
  }
}

// Found by tests/fuzz/model_flag_fuzz: batch * context overflowed int64.
TEST(InferenceMemoryTest, BatchAndContextBeyondTheLimitAreErrorsAndTheLimitIsFinite) {
  const ModelSpec llama = *FindModelPreset("llama-2-7b");
  InferenceConfig config;
  config.batch = INT64_MAX;
  EXPECT_NE(std::string(EstimateInference(llama, config).status().message())
                .find("batch = 9223372036854775807 must be in [1, 1073741824]"),
            std::string::npos);
  config = InferenceConfig();
  config.context = kMaxSequenceOrBatch + 1;
  EXPECT_NE(std::string(EstimateInference(llama, config).status().message())
                .find("context = 1073741825 must be in [0, 1073741824]"),
            std::string::npos);
  config = InferenceConfig();
  config.prompt_tokens = -1;
  EXPECT_FALSE(EstimateInference(llama, config).ok());
  config = InferenceConfig();
  config.batch = kMaxSequenceOrBatch;
  config.context = kMaxSequenceOrBatch;
  absl::StatusOr<MemoryEstimate> estimate = EstimateInference(llama, config);
  ASSERT_TRUE(estimate.ok()) << estimate.status();
  const Term* kv = estimate->Find("kv_cache");
  ASSERT_NE(kv, nullptr);
  EXPECT_TRUE(std::isfinite(kv->value));
  EXPECT_GT(kv->value, 1e20);
}

TEST(InferenceMemoryTest, BareCountNeedsContextZero) {
  const ModelSpec bare = BareModel(1000);
  absl::StatusOr<MemoryEstimate> estimate = EstimateInference(bare, InferenceConfig());
  ASSERT_FALSE(estimate.ok());
  EXPECT_NE(std::string(estimate.status().message()).find("--context 0"), std::string::npos);
}

TEST(GpuPresetsTest, PresetsAndAliases) {
  EXPECT_EQ(FindGpuPreset("H100")->name, "h100-80gb");
  EXPECT_EQ(FindGpuPreset("a100")->name, "a100-80gb");
  EXPECT_EQ(FindGpuPreset("h100-80gb")->memory_bytes, 85017493504.0);
  EXPECT_EQ(FindGpuPreset("h200")->memory_bytes, 150109880320.0);
  EXPECT_EQ(FindGpuPreset("a100-40gb")->bandwidth, 1555e9);
  EXPECT_EQ(FindGpuPreset("rtx-4090")->peak_flops, 165.2e12);
  absl::StatusOr<GpuSpec> unknown = FindGpuPreset("v100");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(std::string(unknown.status().message()).find("v100"), std::string::npos);
}

// llm-analysis's "LLaMA-7B": h 4096, L 32, a 32, V 32000, and an MLP of 8 h^2 (its config uses
// 4h * 2/3 * 3 matrices), i.e. an ungated f = 4h; untied head.
ModelSpec LlmAnalysisLlama7b() {
  ModelSpec spec;
  spec.name = "llm-analysis-llama-7b";
  spec.num_layers = 32;
  spec.hidden_size = 4096;
  spec.num_heads = 32;
  spec.ffn_size = 16384;
  spec.vocab_size = 32000;
  spec.tied_embeddings = false;
  spec.norm = NormKind::kRmsNorm;
  spec.SetLinearBiases(false);
  spec.position_embedding = PositionKind::kRotary;
  return spec;
}

double Find(const std::vector<Term>& terms, const std::string& key) {
  for (const Term& term : terms) {
    if (term.key == key) return term.value;
  }
  ADD_FAILURE() << key;
  return 0;
}

TEST(RooflineTest, LlmAnalysisLlama7bOnA100) {
  // llm-analysis, A100-SXM-80GB (312 TFLOP/s, 2039 GB/s), s 512, b 1, 32 new tokens, ideal
  // efficiency: weights 13.15 GB (without the 262.14 MB input embedding), KV 285.21 MB
  // (544 tokens), prefill 6.87 TFLOP and 22.41 ms, decode 6.73 ms/token.
  const ModelSpec spec = LlmAnalysisLlama7b();
  InferenceConfig config;
  config.weights = DType::kFp16;
  config.kv_cache = DType::kFp16;
  config.context = 544;
  config.prompt_tokens = 512;
  absl::StatusOr<MemoryEstimate> memory = EstimateInference(spec, config);
  ASSERT_TRUE(memory.ok()) << memory.status();
  const double embedding_bytes = 2.0 * 32000 * 4096;
  const double norm_bytes = 2.0 * (2 * 32 + 1) * 4096;
  EXPECT_NEAR((memory->Find("weights")->value - embedding_bytes - norm_bytes) / kGB, 13.15, 0.005);
  EXPECT_NEAR(memory->Find("kv_cache")->value / kMB, 285.21, 0.005);

  const GpuSpec a100 = *FindGpuPreset("a100-80gb");
  absl::StatusOr<std::vector<Term>> timing = RooflineTerms(spec, config, a100, RooflineOptions());
  ASSERT_TRUE(timing.ok()) << timing.status();
  EXPECT_NEAR(Find(*timing, "prefill_flops") / 1e12, 6.87, 0.005);
  // llm-analysis sums a per-operator roofline (memory-bound norms and embedding lookups add
  // 0.39 ms); the whole-model roofline is 1.8 % lower.
  EXPECT_NEAR(Find(*timing, "prefill_seconds") * 1e3, 22.41, 0.02 * 22.41);
  EXPECT_NEAR(Find(*timing, "decode_seconds") * 1e3, 6.73, 0.01 * 6.73);
}

TEST(RooflineTest, DecodeIsMemoryBoundAndPrefillComputeBound) {
  InferenceConfig config;
  config.context = 4096;
  absl::StatusOr<std::vector<Term>> timing = RooflineTerms(
      *FindModelPreset("llama-2-7b"), config, *FindGpuPreset("h100-80gb"), RooflineOptions());
  ASSERT_TRUE(timing.ok()) << timing.status();
  EXPECT_DOUBLE_EQ(Find(*timing, "decode_seconds"), Find(*timing, "decode_bytes") / 3.35e12);
  EXPECT_DOUBLE_EQ(Find(*timing, "prefill_seconds"), Find(*timing, "prefill_flops") / 989e12);
}

TEST(RooflineTest, RejectsBadEfficiencies) {
  RooflineOptions options;
  options.compute_efficiency = 1.5;
  EXPECT_FALSE(RooflineTerms(*FindModelPreset("llama-2-7b"), InferenceConfig(),
                             *FindGpuPreset("h100"), options)
                   .ok());
}

}  // namespace
}  // namespace fragscope::estimator
