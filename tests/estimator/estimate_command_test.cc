// `fragscope estimate`: the README's first example, --json, --explain, --solve, and usage errors
// that name the flag and value with exit code 2.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "tests/estimator/estimate_run.h"

#include "estimator/json_value.h"

namespace fragscope::testing {
namespace {

const std::vector<std::string> kIssueExample = {
    "--preset", "llama-2-13b",   "--train", "--optimizer", "adamw",     "--precision",
    "bf16",     "--zero",        "1",       "--dp",        "8",         "--seq",
    "4096",     "--micro-batch", "1",       "--recompute", "selective", "--gpu",
    "h100-80gb"};

TEST(EstimateCommandTest, IssueExamplePrintsTableAndVerdict) {
  const EstimateResult r = RunEstimate(kIssueExample);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.err.empty());
  for (const char* piece : {"llama-2-13b", "ZeRO-1", "bytes", "GiB", "share", "weights (bf16)",
                            "gradients", "master weights", "optimizer states (adamw", "activations",
                            "CUDA context", "total on GPU", "GPU h100-80gb"}) {
    EXPECT_TRUE(Contains(r.out, piece)) << piece << "\n" << r.out;
  }
}

// GPT-2 has 1024 learned positions: a longer sequence or context is estimated, and flagged.
TEST(EstimateCommandTest, ALengthPastLearnedPositionsIsFlagged) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--preset", "gpt2-small", "--train", "--seq", "4096"},
        std::vector<std::string>{"--preset", "gpt2-small", "--context", "2048"}}) {
    const EstimateResult r = RunEstimate(args);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(Contains(r.out, "is past the model's 1024 learned positions")) << r.out;
  }
  const EstimateResult ok = RunEstimate({"--preset", "gpt2-small", "--train", "--seq", "1024"});
  EXPECT_FALSE(Contains(ok.out, "learned positions")) << ok.out;
}

TEST(EstimateCommandTest, JsonIsMachineReadable) {
  std::vector<std::string> args = kIssueExample;
  args.push_back("--json");
  args.push_back("-");
  const EstimateResult r = RunEstimate(args);
  ASSERT_EQ(r.code, 0) << r.err;
  absl::StatusOr<nlohmann::json> json = estimator::ParseJson(r.out);
  ASSERT_TRUE(json.ok()) << json.status() << "\n" << r.out;
  EXPECT_EQ(json->at("model"), "llama-2-13b");
  EXPECT_GT(json->at("terms").size(), 5u);
}

TEST(EstimateCommandTest, ExplainPrintsFormulasAndSources) {
  std::vector<std::string> args = kIssueExample;
  args.push_back("--explain");
  const EstimateResult r = RunEstimate(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "formula:"));
  EXPECT_TRUE(Contains(r.out, "values:"));
  EXPECT_TRUE(Contains(r.out, "source:"));
  EXPECT_TRUE(Contains(r.out, "Korthikanti"));
  EXPECT_TRUE(Contains(r.out, "13,015,864,320 * 2"));  // the weights term, substituted
}

TEST(EstimateCommandTest, HelpAndLists) {
  EstimateResult r = RunEstimate({"--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(Contains(r.out, "usage: fragscope estimate"));
  r = RunEstimate({"--list-presets"});
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(Contains(r.out, "llama-2-70b"));
  EXPECT_TRUE(Contains(r.out, "68,976,648,192"));
  r = RunEstimate({"--list-gpus"});
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(Contains(r.out, "rtx-4090"));
}

TEST(EstimateCommandTest, InferenceWithRoofline) {
  const EstimateResult r = RunEstimate({"--preset", "llama-2-7b", "--dtype", "fp16", "--context",
                                        "4096", "--batch", "4", "--gpu", "a100-80gb"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* piece : {"KV cache", "overhead (1.2x rule on weights)", "prefill time",
                            "decode time per output token"}) {
    EXPECT_TRUE(Contains(r.out, piece)) << piece << "\n" << r.out;
  }
}

TEST(EstimateCommandTest, BareParameterCount) {
  const EstimateResult r = RunEstimate({"--params", "70B", "--dtype", "fp16", "--context", "0"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "140,000,000,000"));
  EXPECT_TRUE(Contains(r.out, "28,000,000,000"));
}

// Text output is read at 100 columns: the workload, GPU and --explain lines are wrapped.
TEST(EstimateCommandTest, TextFitsOneHundredColumns) {
  std::vector<std::string> explain = kIssueExample;
  explain.push_back("--explain");
  const std::vector<std::vector<std::string>> runs = {
      kIssueExample,
      explain,
      {"--preset", "llama-2-70b", "--dtype", "fp16", "--tp", "4", "--context", "4096", "--batch",
       "8", "--gpu", "a100-80gb", "--explain"},
      {"--preset", "llama-2-70b", "--train", "--zero", "3", "--recompute", "full", "--gpu", "h100",
       "--solve", "min-gpus", "--explain"},
      {"--params", "7e9", "--train", "--gpu", "h100"},
      {"--help"}};
  for (const std::vector<std::string>& args : runs) {
    const EstimateResult r = RunEstimate(args);
    ASSERT_EQ(r.code, 0) << r.err;
    size_t start = 0;
    while (start < r.out.size()) {
      const size_t end = std::min(r.out.find('\n', start), r.out.size());
      EXPECT_LE(end - start, 100u) << r.out.substr(start, end - start);
      start = end + 1;
    }
  }
  // A wrapped line goes on under the text after its label.
  const EstimateResult r = RunEstimate(explain);
  EXPECT_TRUE(Contains(r.out, "\n    formula: ")) << r.out;
  EXPECT_TRUE(Contains(r.out, "GPU h100-80gb (")) << r.out;
}

TEST(EstimateCommandTest, SolveMaxBatchAndMinGpus) {
  EstimateResult r =
      RunEstimate({"--preset", "llama-2-13b", "--train", "--zero", "3", "--dp", "8", "--seq",
                   "4096", "--recompute", "selective", "--gpu", "h100", "--solve", "max-batch"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "largest micro-batch that fits h100-80gb: ")) << r.out;
  r = RunEstimate({"--preset", "llama-2-70b", "--train", "--zero", "3", "--recompute", "full",
                   "--gpu", "h100", "--solve", "min-gpus", "--json", "-"});
  ASSERT_EQ(r.code, 0) << r.err;
  absl::StatusOr<nlohmann::json> json = estimator::ParseJson(r.out);
  ASSERT_TRUE(json.ok()) << json.status() << "\n" << r.out;
  EXPECT_EQ(json->at("solve"), "min-gpus");
  EXPECT_GT(json->at("answer").get<double>(), 1);
  // Model states only: memory does not grow with the micro-batch, so the search ends at the
  // largest accepted value and says so.
  r = RunEstimate({"--preset", "llama-2-7b", "--train", "--no-activations", "--zero", "3", "--dp",
                   "8", "--gpu", "h100", "--solve", "max-batch"});
  ASSERT_EQ(r.code, 0) << r.err;
  // The line is wrapped at 100 columns.
  const std::string unwrapped = absl::StrReplaceAll(r.out, {{"\n  ", " "}});
  EXPECT_TRUE(Contains(unwrapped,
                       "largest micro-batch that fits h100-80gb: 1073741824 (the largest accepted "
                       "value: memory does not limit it)"))
      << r.out;
}

// Every usage error: exit code 2, a message naming the flag and the value, nothing on stdout.
void ExpectUsageError(const std::vector<std::string>& args,
                      std::initializer_list<std::string> pieces) {
  const EstimateResult r = RunEstimate(args);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(r.out.empty()) << r.out;
  for (const std::string& piece : pieces) {
    EXPECT_TRUE(Contains(r.err, piece)) << "'" << piece << "' not in: " << r.err;
  }
}

// --params alone: the model states are estimated; activations and the KV cache, which need the
// architecture, are left out and a note says so. A flag that asks for them is an error instead.
TEST(EstimateCommandTest, BareParameterCountAloneLeavesOutWhatNeedsTheArchitecture) {
  EstimateResult r = RunEstimate({"--params", "7e9", "--train"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* piece : {"weights (bf16)", "gradients", "optimizer states (adamw",
                            "note: activations not estimated: --params alone is a bare parameter "
                            "count"}) {
    EXPECT_TRUE(Contains(r.out, piece)) << piece << "\n" << r.out;
  }
  EXPECT_FALSE(Contains(r.out, "activations (")) << r.out;
  r = RunEstimate({"--params", "7e9"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "14,000,000,000")) << r.out;
  EXPECT_TRUE(Contains(r.out, "note: KV cache not estimated: --params alone is a bare parameter"))
      << r.out;
  EXPECT_FALSE(Contains(r.out, "  KV cache (")) << r.out;
  r = RunEstimate({"--params", "7e9", "--gpu", "h100", "--json", "-"});
  ASSERT_EQ(r.code, 0) << r.err;
  absl::StatusOr<nlohmann::json> json = estimator::ParseJson(r.out);
  ASSERT_TRUE(json.ok()) << json.status() << "\n" << r.out;
  EXPECT_TRUE(Contains(r.out, "KV cache not estimated")) << r.out;
  ExpectUsageError({"--params", "7B", "--train", "--seq", "4096"},
                   {"activations", "--no-activations"});
  ExpectUsageError({"--params", "7B", "--context", "4096"}, {"KV cache", "--context 0"});
}

TEST(EstimateCommandTest, BadFlagsAndValuesNameThem) {
  ExpectUsageError({"--preset", "llama-2-7b", "--frobnicate"}, {"--frobnicate"});
  ExpectUsageError({"--preset", "llama-2-7b", "--train", "--tp", "abc"}, {"--tp", "abc"});
  ExpectUsageError({"--preset", "llama-2-7b", "--train", "--tp", "-2"}, {"--tp", "-2"});
  ExpectUsageError({"--preset", "llama-2-7b", "--train", "--zero", "5"}, {"--zero", "5"});
  ExpectUsageError({"--preset", "llama-2-7b", "--train", "--optimizer", "lion"},
                   {"--optimizer", "lion"});
  ExpectUsageError({"--preset", "llama-2-7b", "--train", "--precision", "fp64"},
                   {"--precision", "fp64"});
  ExpectUsageError({"--preset", "llama-2-7b", "--train", "--recompute", "some"},
                   {"--recompute", "some"});
  ExpectUsageError({"--preset", "llama-9-1b"}, {"--preset", "llama-9-1b"});
  ExpectUsageError({"--preset", "llama-2-7b", "--gpu", "tpu-v5"}, {"--gpu", "tpu-v5"});
  ExpectUsageError({"--preset", "llama-2-7b", "--dtype", "int3"}, {"--dtype", "int3"});
  ExpectUsageError({"--preset", "llama-2-7b", "--seq"}, {"--seq"});
  ExpectUsageError({"--preset", "llama-2-7b", "--train", "--seq", "0"}, {"--seq", "0"});
  ExpectUsageError({"--preset", "llama-2-7b", "--params", "lots"}, {"--params", "lots"});
  ExpectUsageError({"--preset", "llama-2-7b", "--tp", "2", "--tp", "4"}, {"--tp", "twice"});
  ExpectUsageError({"--preset", "llama-2-7b", "--explain=yes"}, {"--explain", "yes"});
  ExpectUsageError({"--preset", "llama-2-7b", "--json"}, {"--json", "needs a value (PATH)"});
  ExpectUsageError({"--preset", "llama-2-7b", "--json", "--explain"},
                   {"--json", "not the flag --explain"});
  ExpectUsageError({"llama-2-7b"}, {"llama-2-7b"});
  ExpectUsageError({}, {"--preset"});
  ExpectUsageError({"--tp", "x"}, {"--tp", "'x'"});
  ExpectUsageError({"--preset", "llama-2-7b", "--train", "--batch", "4"}, {"--batch", "inference"});
  ExpectUsageError({"--preset", "llama-2-7b", "--solve", "max-batch"}, {"--solve", "--gpu"});
  ExpectUsageError({"--preset", "llama-2-7b", "--gpu", "h100", "--solve", "everything"},
                   {"--solve", "everything"});
}

TEST(EstimateCommandTest, SemanticErrorsNameTheField) {
  ExpectUsageError({"--preset", "llama-2-7b", "--train", "--seq", "9223372036854775807"},
                   {"--seq = 9223372036854775807 must be in [1, 1073741824]"});
  ExpectUsageError({"--preset", "llama-2-7b", "--batch", "2000000000"},
                   {"--batch = 2000000000 must be in [1, 1073741824]"});
  ExpectUsageError({"--preset", "llama-2-13b", "--train", "--tp", "3"},
                   {"--tp = 3", "num_heads = 40"});
  ExpectUsageError({"--preset", "llama-2-70b", "--train", "--tp", "16"},
                   {"--tp = 16", "num_kv_heads = 8"});
  ExpectUsageError({"--preset", "llama-2-7b", "--train", "--offload-params"}, {"offload-params"});
  ExpectUsageError(
      {"--preset", "gpt2-small", "--train", "--lora-rank", "8", "--lora-targets", "q,gate"},
      {"gate"});
  ExpectUsageError({"--preset", "gpt2-small", "--train", "--lora-targets", "q,x"},
                   {"--lora-targets", "'x'"});
}

TEST(EstimateCommandTest, BadModelJsonNamesFileFieldAndPosition) {
  const std::string path = ::testing::TempDir() + "/fragscope_bad_spec.json";
  {
    std::ofstream file(path);
    file << "{\n  \"base\": \"llama-2-7b\",\n  \"hidden_size\": -5\n}\n";
  }
  ExpectUsageError({"--model-json", path}, {"--model-json", path, "hidden_size", "-5"});
  {
    std::ofstream file(path);
    file << "{\n  \"num_layers\": 32,\n}\n";
  }
  ExpectUsageError({"--model-json", path}, {"--model-json", "line 3, column 1"});
  {
    std::ofstream file(path);
    file << R"({"base": "llama-2-7b", "num_heads": 48})";
  }
  ExpectUsageError({"--model-json", path}, {"num_heads = 48", "hidden_size = 4096"});
  {
    std::ofstream file(path);
    file << R"({"base": "llama-2-70b", "num_kv_heads": 3})";
  }
  ExpectUsageError({"--model-json", path}, {"num_kv_heads = 3", "num_heads = 64"});
  std::remove(path.c_str());
  ExpectUsageError({"--model-json", "/nonexistent/x.json"},
                   {"/nonexistent/x.json", "No such file or directory"});
  ExpectUsageError({"--model-json", ::testing::TempDir()}, {"is a directory"});
}

TEST(EstimateCommandTest, TorchAutocastActivationModel) {
  const EstimateResult r =
      RunEstimate({"--preset", "gpt2", "--train", "--seq", "512", "--micro-batch", "8",
                   "--flash-attention", "--activation-model", "torch-autocast"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "activations (torch-autocast model)")) << r.out;
  EXPECT_TRUE(Contains(r.out, "loss backward")) << r.out;
  EXPECT_TRUE(Contains(r.out, "[not at the peak]")) << r.out;
  EXPECT_TRUE(Contains(r.out, "no peak")) << r.out;
  ExpectUsageError({"--preset", "gpt2", "--train", "--activation-model", "eager"},
                   {"activation-model", "eager", "korthikanti or torch-autocast"});
  ExpectUsageError({"--preset", "gpt2", "--train", "--persistent-grads"},
                   {"persistent-grads", "torch-autocast"});
}

}  // namespace
}  // namespace fragscope::testing
