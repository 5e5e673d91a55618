// Reports: the JSON parses with the estimator's own strict reader and carries every term;
// --explain prints each term's formula, values and source.
#include <string>

#include "gtest/gtest.h"
#include "tests/estimator/example_models.h"

#include "estimator/gpu_presets.h"
#include "estimator/json_value.h"
#include "estimator/model_presets.h"
#include "estimator/report.h"
#include "estimator/training_memory.h"

namespace fragscope::estimator {
namespace {

using ::fragscope::testing::ReadmeExampleTraining;

Report TrainingReport() {
  Report report;
  report.estimate = *EstimateTraining(*FindModelPreset("llama-2-13b"), ReadmeExampleTraining());
  report.has_gpu = true;
  report.gpu = *FindGpuPreset("h100-80gb");
  return report;
}

TEST(ReportTest, JsonIsValidAndComplete) {
  const Report report = TrainingReport();
  absl::StatusOr<nlohmann::json> json = ParseJson(RenderJson(report));
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(json->at("model"), "llama-2-13b");
  EXPECT_EQ(json->at("parameters").get<double>(), 13015864320.0);
  ASSERT_TRUE(json->contains("terms"));
  const nlohmann::json& terms = json->at("terms");
  ASSERT_EQ(terms.size(), report.estimate.terms.size());
  double sum = 0;
  for (const nlohmann::json& term : terms) {
    for (const char* key :
         {"key", "label", "placement", "bytes", "gib", "share", "formula", "values", "source"}) {
      EXPECT_TRUE(term.contains(key)) << key;
    }
    sum += term.at("bytes").get<double>();
  }
  EXPECT_NEAR(sum, json->at("device_total_bytes").get<double>(), 1.0);
  ASSERT_TRUE(json->contains("gpu"));
  const nlohmann::json& gpu = json->at("gpu");
  EXPECT_EQ(gpu.at("name"), "h100-80gb");
  EXPECT_TRUE(gpu.at("fits").is_boolean());
}

TEST(ReportTest, TextShowsTermsTotalAndVerdict) {
  const std::string text = RenderText(TrainingReport());
  for (const char* piece :
       {"llama-2-13b", "13,015,864,320", "weights (bf16)", "optimizer states", "activations",
        "CUDA context", "total on GPU", "GPU h100-80gb", "GiB = 2^30 bytes"}) {
    EXPECT_NE(text.find(piece), std::string::npos) << piece << "\n" << text;
  }
  EXPECT_TRUE(text.find("fits") != std::string::npos ||
              text.find("DOES NOT FIT") != std::string::npos);
}

TEST(ReportTest, ExplainHasFormulaValuesAndSourceForEveryTerm) {
  const Report report = TrainingReport();
  const std::string text = RenderExplain(report);
  for (const Term& term : report.estimate.terms) {
    const size_t at = text.find(term.label + " = ");
    ASSERT_NE(at, std::string::npos) << term.label;
    const size_t formula = text.find("    formula: " + term.formula, at);
    EXPECT_NE(formula, std::string::npos) << term.label;
    EXPECT_NE(text.find("    source:  " + term.source, at), std::string::npos) << term.label;
    EXPECT_FALSE(term.formula.empty()) << term.key;
    EXPECT_FALSE(term.values.empty()) << term.key;
    EXPECT_FALSE(term.source.empty()) << term.key;
  }
}

TEST(ReportTest, FormatSeconds) {
  EXPECT_EQ(FormatSeconds(0.04595), "45.95 ms");
  EXPECT_EQ(FormatSeconds(2.5), "2.5 s");
  EXPECT_EQ(FormatSeconds(0.0005), "500 us");
}

TEST(TermTest, FormatCount) {
  EXPECT_EQ(FormatCount(13015864320.0), "13,015,864,320");
  EXPECT_EQ(FormatCount(999), "999");
  EXPECT_EQ(FormatCount(-1234.4), "-1,234");
  EXPECT_EQ(FormatNumber(1.4375), "1.4375");
  EXPECT_EQ(FormatNumber(8), "8");
}

}  // namespace
}  // namespace fragscope::estimator
