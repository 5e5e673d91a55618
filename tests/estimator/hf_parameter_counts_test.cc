// The estimator's parameter count of Hugging Face configs equals transformers' own:
// tests/estimator/hf_parameter_counts.json holds, for the 30 decoder-only types of
// tests/predict/causal_lm_types.py and for variants that switch on their optional structure,
// the config and sum(p.numel() for p in model.parameters()) of the model transformers builds
// from it (make_hf_parameter_counts.py; hf_parameter_counts_check re-runs it against the file).
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "estimator/model_spec_json.h"
#include "estimator/parameter_count.h"

namespace fragscope::estimator {
namespace {

using Json = nlohmann::json;

Json LoadCounts() {
  const std::string path = std::string(FRAGSCOPE_ESTIMATOR_TEST_DIR) + "/hf_parameter_counts.json";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::stringstream text;
  text << in.rdbuf();
  return Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
}

// Reads every entry of `list` and compares its count; returns how many were compared.
int CompareAll(const Json& list) {
  int compared = 0;
  for (const Json& entry : list) {
    const std::string name = entry.at("model_type").get<std::string>();
    absl::StatusOr<ModelSpec> spec = ModelSpecFromJson(entry.at("config").dump());
    EXPECT_TRUE(spec.ok()) << name << ": " << spec.status();
    if (!spec.ok()) continue;
    EXPECT_TRUE(spec->assumptions.empty()) << name << ": " << spec->assumptions.front();
    absl::StatusOr<ParameterCount> count = CountParameters(*spec);
    EXPECT_TRUE(count.ok()) << name << ": " << count.status();
    if (!count.ok()) continue;
    EXPECT_EQ(count->total, entry.at("parameters").get<int64_t>()) << name;
    EXPECT_EQ(count->architectural_total, count->total) << name;
    EXPECT_EQ(count->blocks, count->dense_layers * count->per_dense_layer +
                                 count->moe_layers * count->per_moe_layer)
        << name;
    ++compared;
  }
  return compared;
}

TEST(HfParameterCountsTest, EveryCausalLmTypeCountsExactly) {
  const Json counts = LoadCounts();
  ASSERT_TRUE(counts.is_object());
  EXPECT_EQ(CompareAll(counts.at("types")), 30);
}

TEST(HfParameterCountsTest, EveryStructureSwitchCountsExactly) {
  const Json counts = LoadCounts();
  ASSERT_TRUE(counts.is_object());
  EXPECT_GE(CompareAll(counts.at("variants")), 19);
}

TEST(HfParameterCountsTest, DeepSeekV3HasOneDenseAndOneMoeLayer) {
  const Json counts = LoadCounts();
  ASSERT_TRUE(counts.is_object());
  for (const Json& entry : counts.at("types")) {
    if (entry.at("model_type") != "deepseek_v3") continue;
    absl::StatusOr<ModelSpec> spec = ModelSpecFromJson(entry.at("config").dump());
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_TRUE(spec->is_mla());
    EXPECT_EQ(spec->head_dim, 192);  // qk_nope_head_dim 128 + qk_rope_head_dim 64
    EXPECT_EQ(spec->value_head_dim(), 128);
    EXPECT_EQ(spec->dense_layers, 1);
    EXPECT_EQ(spec->moe_layers(), 1);
    EXPECT_EQ(spec->shared_expert_ffn_size, 2048);
    absl::StatusOr<ParameterCount> count = CountParameters(*spec);
    ASSERT_TRUE(count.ok());
    EXPECT_EQ(count->router, 256 * 7168);  // e_score_correction_bias is a buffer, not counted
    // 8 of 256 experts active: the other 248 experts' weights drop out of the active count.
    EXPECT_EQ(count->total - count->active, int64_t{248} * 3 * 7168 * 2048);
    return;
  }
  FAIL() << "deepseek_v3 is not in hf_parameter_counts.json";
}

}  // namespace
}  // namespace fragscope::estimator
