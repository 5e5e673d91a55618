// `fragscope estimate` says what it assumes: the header line (and JSON) name the activation
// model, recompute, flash attention and dropout; --activation-model torch-autocast says it has no
// measured basis under LoRA/QLoRA and refuses recompute with the reason; inference timing names
// per-batch and per-sequence prefill; --json PATH writes a file and --json - stdout alone.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/estimator/estimate_run.h"
#include "tests/testing/unwrapped.h"

#include "estimator/json_value.h"

namespace fragscope::testing {
namespace {

nlohmann::json ParsedJson(const std::string& text) {
  absl::StatusOr<nlohmann::json> json = estimator::ParseJson(text);
  EXPECT_TRUE(json.ok()) << json.status() << "\n" << text;
  return json.ok() ? *json : nlohmann::json();
}

TEST(EstimateAssumptionsTest, HeaderStatesFlashAttentionAndDropout) {
  EstimateResult r = RunEstimate({"--preset", "llama-2-7b", "--train"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Contains(Unwrapped(r.out),
                       "activations (korthikanti model): recompute none, flash "
                       "attention off, dropout on"))
      << r.out;
  r = RunEstimate({"--preset", "llama-2-7b", "--train", "--flash-attention", "--no-dropout",
                   "--recompute", "selective"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Contains(Unwrapped(r.out),
                       "activations (korthikanti model): recompute selective, "
                       "flash attention on, dropout off"))
      << r.out;
  r = RunEstimate({"--preset", "llama-2-7b", "--train", "--no-activations"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "activations not counted")) << r.out;
  EXPECT_FALSE(Contains(r.out, "dropout on")) << r.out;
}

TEST(EstimateAssumptionsTest, JsonCarriesTheAssumptionsAsFields) {
  EstimateResult r = RunEstimate({"--preset", "gpt2", "--train", "--flash-attention",
                                  "--activation-model", "torch-autocast", "--json", "-"});
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json json = ParsedJson(r.out);
  ASSERT_TRUE(json.contains("activations")) << r.out;
  const nlohmann::json& a = json["activations"];
  EXPECT_TRUE(a["counted"].get<bool>());
  EXPECT_EQ(a["model"].get<std::string>(), "torch-autocast");
  EXPECT_EQ(a["recompute"].get<std::string>(), "none");
  EXPECT_TRUE(a["flash_attention"].get<bool>());
  EXPECT_TRUE(a["dropout"].get<bool>());
  EXPECT_TRUE(Contains(json["workload"].get<std::string>(), "flash attention on, dropout on"));
  // Inference stores no activations.
  r = RunEstimate({"--preset", "gpt2", "--json", "-"});
  ASSERT_EQ(r.code, 0) << r.err;
  json = ParsedJson(r.out);
  ASSERT_TRUE(json.contains("activations")) << r.out;
  EXPECT_TRUE(json["activations"].is_null()) << r.out;
}

// The torch-autocast model was measured on full fine-tuning and on LoRA and QLoRA of Llama-family
// decoders (lora_activations.h): under the adapter jobs outside that, it says, in the
// notes (text, --explain, JSON) and in the activation terms' sources, that nothing measured
// stands behind it.
TEST(EstimateAssumptionsTest, AutocastUnderLoraSaysItHasNoMeasuredBasis) {
  const std::vector<std::string> qlora = {
      "--preset",          "gpt2-small",         "--train",       "--lora-rank", "16", "--qlora",
      "--flash-attention", "--activation-model", "torch-autocast"};
  EstimateResult r = RunEstimate(qlora);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Contains(Unwrapped(r.out),
                       "note: activation-model torch-autocast has no measured basis with "
                       "QLoRA"))
      << r.out;
  std::vector<std::string> explain = qlora;
  explain.push_back("--explain");
  r = RunEstimate(explain);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Contains(Unwrapped(r.out),
                       "no measured basis with QLoRA: the full fine-tuning's "
                       "tensors"))
      << r.out;
  std::vector<std::string> as_json = qlora;
  as_json.insert(as_json.end(), {"--json", "-"});
  r = RunEstimate(as_json);
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json json = ParsedJson(r.out);
  bool noted = false;
  for (const nlohmann::json& note : json["notes"]) {
    noted |= Contains(note.get<std::string>(), "no measured basis with QLoRA");
  }
  EXPECT_TRUE(noted) << r.out;

  r = RunEstimate({"--preset", "gpt2-small", "--train", "--lora-rank", "16", "--activation-model",
                   "torch-autocast"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Contains(Unwrapped(r.out), "no measured basis with LoRA")) << r.out;
  // LoRA and QLoRA on a Llama-family decoder have their own terms (estimator/lora_activations.h).
  for (const char* method : {"--lora-rank", "--qlora"}) {
    std::vector<std::string> args = {"--preset",      "llama-2-7b", "--train",
                                     "--lora-rank",   "16",         "--activation-model",
                                     "torch-autocast"};
    if (std::string(method) == "--qlora") args.push_back("--qlora");
    r = RunEstimate(args);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_FALSE(Contains(r.out, "no measured basis")) << r.out;
  }
  // Full fine-tuning is what was measured: no such note.
  r = RunEstimate({"--preset", "llama-2-7b", "--train", "--activation-model", "torch-autocast"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(Contains(r.out, "no measured basis")) << r.out;
  // Korthikanti's formula is not a measurement of a job: nothing to say.
  r = RunEstimate({"--preset", "llama-2-7b", "--train", "--lora-rank", "16", "--qlora"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(Contains(r.out, "no measured basis")) << r.out;
}

// Recompute under torch-autocast (QLoRA's usual set-up) is refused with the reason, exit 2.
TEST(EstimateAssumptionsTest, AutocastWithRecomputeIsRefusedWithTheReason) {
  EstimateResult r =
      RunEstimate({"--preset", "llama-2-7b", "--train", "--lora-rank", "16", "--qlora",
                   "--activation-model", "torch-autocast", "--recompute", "full"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(r.out.empty()) << r.out;
  for (const char* piece : {"torch-autocast with recompute full is not modelled",
                            "without activation checkpointing", "activation-model korthikanti"}) {
    EXPECT_TRUE(Contains(r.err, piece)) << piece << " not in: " << r.err;
  }
  r = RunEstimate({"--preset", "llama-2-7b", "--train", "--activation-model", "torch-autocast",
                   "--recompute", "selective"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(Contains(r.err, "transformers checkpoints whole layers")) << r.err;
}

// A batch's prefill is of all its sequences: each one's first token comes after it. Both the
// per-batch and the per-sequence figure are printed, and the second is 1/b of the first when
// the prefill is compute-bound.
TEST(EstimateAssumptionsTest, InferenceTimingNamesPerBatchAndPerSequencePrefill) {
  EstimateResult r = RunEstimate({"--preset", "llama-2-7b", "--dtype", "fp16", "--context", "4096",
                                  "--batch", "4", "--gpu", "a100-80gb"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out,
                       "prefill time per batch (4 x 4096 tokens: each sequence's time to "
                       "first token)"))
      << r.out;
  EXPECT_TRUE(Contains(r.out, "prefill time per sequence (4096 tokens, prefilled alone)")) << r.out;
  EXPECT_TRUE(Contains(r.out, "decode time per output token (4 sequences, one token each"))
      << r.out;
  r = RunEstimate({"--preset", "llama-2-7b", "--dtype", "fp16", "--context", "4096", "--batch", "4",
                   "--gpu", "a100-80gb", "--json", "-"});
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json json = ParsedJson(r.out);
  double batch = 0;
  double sequence = 0;
  for (const nlohmann::json& t : json["timing"]) {
    if (t["key"] == "prefill_seconds") batch = t["value"].get<double>();
    if (t["key"] == "prefill_seconds_per_sequence") sequence = t["value"].get<double>();
  }
  EXPECT_GT(sequence, 0) << r.out;
  EXPECT_NEAR(batch / sequence, 4.0, 1e-6) << r.out;
  // One sequence: one figure, the time to first token.
  r = RunEstimate(
      {"--preset", "llama-2-7b", "--dtype", "fp16", "--context", "4096", "--gpu", "a100-80gb"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "prefill time (time to first token, 4096 tokens)")) << r.out;
  EXPECT_FALSE(Contains(r.out, "per sequence")) << r.out;
}

// --json PATH (as analyze and sweep take it): the file, and the text report on stdout; --json -:
// the document alone on stdout; a path that cannot be written: exit 1 naming it.
TEST(EstimateAssumptionsTest, JsonTakesAPathOrDashForStdout) {
  const std::string path = ::testing::TempDir() + "/fragscope_estimate.json";
  std::remove(path.c_str());
  EstimateResult r = RunEstimate({"--preset", "gpt2", "--train", "--json", path});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "total on GPU")) << r.out;
  EXPECT_TRUE(Contains(r.out, "JSON report: " + path)) << r.out;
  std::ifstream file(path);
  std::stringstream written;
  written << file.rdbuf();
  EXPECT_EQ(ParsedJson(written.str())["model"].get<std::string>(), "gpt2-small");
  std::remove(path.c_str());

  r = RunEstimate({"--preset", "gpt2", "--train", "--json=-"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(Contains(r.out, "total on GPU")) << r.out;
  EXPECT_EQ(ParsedJson(r.out)["model"].get<std::string>(), "gpt2-small");

  r = RunEstimate({"--preset", "gpt2", "--train", "--json", "/nonexistent-dir/e.json"});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(Contains(r.err, "/nonexistent-dir/e.json")) << r.err;
  EXPECT_FALSE(Contains(r.err, "--help")) << r.err;  // not a usage error
}

}  // namespace
}  // namespace fragscope::testing
