// Parameter counts: docs/estimator_reference.md §8.1 and the published sizes of the presets.
#include <cstdint>
#include <string>

#include "gtest/gtest.h"
#include "tests/estimator/example_models.h"

#include "estimator/model_presets.h"
#include "estimator/parameter_count.h"

namespace fragscope::estimator {
namespace {

using ::fragscope::testing::BareModel;

int64_t PresetCount(const std::string& name) {
  absl::StatusOr<ModelSpec> spec = FindModelPreset(name);
  EXPECT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<ParameterCount> count = CountParameters(*spec);
  EXPECT_TRUE(count.ok()) << count.status();
  return count.ok() ? count->total : -1;
}

TEST(ParameterCountTest, ReproducesReferenceSection81) {
  EXPECT_EQ(PresetCount("llama-2-7b"), 6738415616);
  EXPECT_EQ(PresetCount("llama-2-13b"), 13015864320);
  EXPECT_EQ(PresetCount("llama-2-70b"), 68976648192);
  EXPECT_EQ(PresetCount("llama-3-8b"), 8030261248);
  EXPECT_EQ(PresetCount("gpt-3-175b"), 174604259328);
  EXPECT_EQ(PresetCount("bloom-176b"), 176247271424);
  // OPT-175B: "as GPT-3 with V 50272, 2050 positions, approximately 174.60 B".
  EXPECT_NEAR(static_cast<double>(PresetCount("opt-175b")), 174.60e9, 0.005e9);
}

TEST(ParameterCountTest, MatchesHuggingFaceCountsOfSmallerPresets) {
  // Hugging Face num_parameters() of gpt2, gpt2-medium/-large/-xl, facebook/opt-125m,
  // Meta-Llama-3-70B and Mixtral-8x7B-v0.1.
  EXPECT_EQ(PresetCount("gpt2-small"), 124439808);
  EXPECT_EQ(PresetCount("gpt2"), 124439808);
  EXPECT_EQ(PresetCount("gpt2-medium"), 354823168);
  EXPECT_EQ(PresetCount("gpt2-large"), 774030080);
  EXPECT_EQ(PresetCount("gpt2-xl"), 1557611200);
  EXPECT_EQ(PresetCount("opt-125m"), 125239296);
  EXPECT_EQ(PresetCount("opt-1.3b"), 1315758080);
  EXPECT_EQ(PresetCount("opt-6.7b"), 6658473984);
  EXPECT_EQ(PresetCount("llama-3-70b"), 70553706496);
  EXPECT_EQ(PresetCount("mixtral-8x7b"), 46702792704);
}

TEST(ParameterCountTest, EveryPresetIsValidAndSumsItsBreakdown) {
  for (const ModelSpec& spec : ModelPresets()) {
    absl::StatusOr<ParameterCount> count = CountParameters(spec);
    ASSERT_TRUE(count.ok()) << spec.name << ": " << count.status();
    const int64_t model_level = count->embedding + count->position_embedding +
                                count->embedding_norm + count->final_norm + count->output_layer;
    EXPECT_EQ(count->total, count->blocks + model_level) << spec.name;
    const int64_t per_layer = spec.is_moe() ? count->per_moe_layer : count->per_dense_layer;
    EXPECT_EQ(count->blocks, spec.num_layers * per_layer) << spec.name;
    EXPECT_LE(count->active, count->total) << spec.name;
    EXPECT_GT(count->largest_module, 0) << spec.name;
  }
}

TEST(ParameterCountTest, LlamaFormulaOfReference) {
  // 2 V h + L (2h^2 + 2 h g d_h + 3 h f + 2h) + h for Llama-2-70B (GQA, g = 8, d_h = 128).
  const int64_t v = 32000, h = 8192, l = 80, g = 8, d = 128, f = 28672;
  EXPECT_EQ(PresetCount("llama-2-70b"),
            2 * v * h + l * (2 * h * h + 2 * h * g * d + 3 * h * f + 2 * h) + h);
}

TEST(ParameterCountTest, MixtralActiveCountUsesTopTwoExperts) {
  absl::StatusOr<ParameterCount> count = CountParameters(*FindModelPreset("mixtral-8x7b"));
  ASSERT_TRUE(count.ok());
  // Mistral's announcement: 46.7 B total, 12.9 B used per token.
  EXPECT_NEAR(static_cast<double>(count->active), 12.88e9, 0.01e9);
  EXPECT_EQ(count->router, 4096 * 8);
}

TEST(ParameterCountTest, LargestModuleIsDeepSpeedsLargestLayer) {
  absl::StatusOr<ParameterCount> count = CountParameters(*FindModelPreset("llama-2-7b"));
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(count->largest_module, 131072000);  // the embedding, as in reference 8.2
}

TEST(ParameterCountTest, BareCountHasNoBreakdown) {
  ModelSpec spec;
  spec.name = "7e9";
  spec.parameter_count = 7000000000;
  absl::StatusOr<ParameterCount> count = CountParameters(spec);
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_FALSE(count->architectural);
  EXPECT_EQ(count->total, 7000000000);
  EXPECT_EQ(count->blocks, 0);
}

// Found by tests/fuzz/model_spec_json_fuzz: a Mixtral config with 1,162,171,968 heads of 128
// made the integer counts overflow. Specs beyond 9e15 parameters are errors that name the sizes.
TEST(ParameterCountTest, SpecsBeyondTheParameterLimitAreErrors) {
  ModelSpec spec = *FindModelPreset("mixtral-8x7b");
  spec.num_heads = 1162171968;
  spec.num_kv_heads = 8;
  spec.head_dim = 128;
  absl::Status status = CountParameters(spec).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(status.message()).find("num_heads = 1162171968"), std::string::npos)
      << status;
  EXPECT_NE(std::string(status.message()).find("beyond the limit of 9e15"), std::string::npos);

  ModelSpec wide = *FindModelPreset("gpt2-small");
  wide.hidden_size = int64_t{1} << 40;  // 4h^2 per layer alone overflows int64
  wide.num_heads = 1;
  EXPECT_FALSE(CountParameters(wide).ok());

  ModelSpec bare = BareModel(int64_t{9'000'000'000'000'001});
  status = CountParameters(bare).status();
  EXPECT_NE(std::string(status.message()).find("parameter_count = 9000000000000001"),
            std::string::npos)
      << status;
  bare.parameter_count = int64_t{9'000'000'000'000'000};
  EXPECT_TRUE(CountParameters(bare).ok());
}

TEST(ParameterCountTest, GivenCountOverridesArchitecturalTotal) {
  ModelSpec spec = *FindModelPreset("llama-2-7b");
  spec.parameter_count = 7000000000;
  absl::StatusOr<ParameterCount> count = CountParameters(spec);
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(count->total, 7000000000);
  EXPECT_EQ(count->architectural_total, 6738415616);
  EXPECT_NEAR(count->given_count_scale(), 7e9 / 6738415616.0, 1e-12);
}

TEST(ParameterCountTest, AdafactorFactoredCountIsFarBelowParameterCount) {
  absl::StatusOr<ParameterCount> count = CountParameters(*FindModelPreset("gpt2-small"));
  ASSERT_TRUE(count.ok());
  // Per layer: the fused c_attn 768 + 2304 and O 768 + 768 = 4608; MLP 2 x (768 + 3072) = 7680;
  // vectors (biases 3*768 + 768 + 3072 + 768, norms 4*768) = 9984; 12 layers = 267,264. Plus
  // the embedding (50257 + 768), positions (1024 + 768) and the final norm (1536).
  EXPECT_EQ(count->factored_second_moment, 267264 + 51025 + 1792 + 1536);
  EXPECT_LT(count->factored_second_moment, count->total / 100);
}

}  // namespace
}  // namespace fragscope::estimator
