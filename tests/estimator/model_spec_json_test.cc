// Model specs: validation errors name the field; the JSON reader is strict and names the key.
#include <cstdio>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

#include "estimator/json_value.h"
#include "estimator/model_presets.h"
#include "estimator/model_spec.h"
#include "estimator/model_spec_json.h"
#include "estimator/parallel_layout.h"
#include "estimator/parameter_count.h"

namespace fragscope::estimator {
namespace {

// Expects an error whose message contains every piece.
void ExpectError(const absl::Status& status, std::initializer_list<std::string> pieces) {
  ASSERT_FALSE(status.ok());
  for (const std::string& piece : pieces) {
    EXPECT_NE(std::string(status.message()).find(piece), std::string::npos)
        << "'" << piece << "' not in: " << status.message();
  }
}

TEST(ModelSpecTest, NegativeSizesNameTheField) {
  ModelSpec spec = *FindModelPreset("llama-2-7b");
  spec.hidden_size = -4096;
  ExpectError(ValidateModelSpec(spec), {"hidden_size", "-4096", "negative"});
  spec = *FindModelPreset("llama-2-7b");
  spec.num_layers = -1;
  ExpectError(ValidateModelSpec(spec), {"num_layers", "-1"});
  spec = *FindModelPreset("llama-2-7b");
  spec.vocab_size = 0;
  ExpectError(ValidateModelSpec(spec), {"vocab_size", "0"});
}

TEST(ModelSpecTest, HeadsNotDividingHiddenNamesBoth) {
  ModelSpec spec = *FindModelPreset("llama-2-7b");
  spec.num_heads = 30;
  spec.num_kv_heads = 30;
  ExpectError(ValidateModelSpec(spec), {"num_heads = 30", "hidden_size = 4096"});
}

TEST(ModelSpecTest, ExplicitHeadDimAllowsHeadsNotDividingHidden) {
  ModelSpec spec = *FindModelPreset("llama-2-7b");
  spec.num_heads = 30;
  spec.num_kv_heads = 30;
  spec.head_dim = 128;
  EXPECT_TRUE(ValidateModelSpec(spec).ok());
}

TEST(ModelSpecTest, GqaGroupsNotDividingHeads) {
  ModelSpec spec = *FindModelPreset("llama-2-70b");
  spec.num_kv_heads = 6;
  ExpectError(ValidateModelSpec(spec), {"num_kv_heads = 6", "num_heads = 64"});
}

TEST(ModelSpecTest, TopKMustBeWithinExperts) {
  ModelSpec spec = *FindModelPreset("mixtral-8x7b");
  spec.experts_top_k = 9;
  ExpectError(ValidateModelSpec(spec), {"experts_top_k = 9", "num_experts = 8"});
}

TEST(ParallelLayoutTest, TensorParallelNotDividingHeads) {
  ParallelLayout layout;
  layout.tp = 3;
  ExpectError(ValidateParallelLayout(layout, *FindModelPreset("llama-2-13b"), LayoutUse::kTraining),
              {"tp = 3", "num_heads = 40"});
}

TEST(ParallelLayoutTest, TrainingTensorParallelMustDivideKvHeads) {
  ParallelLayout layout;
  layout.tp = 16;
  ExpectError(ValidateParallelLayout(layout, *FindModelPreset("llama-2-70b"), LayoutUse::kTraining),
              {"tp = 16", "num_kv_heads = 8"});
  // Inference engines replicate KV heads instead.
  EXPECT_TRUE(
      ValidateParallelLayout(layout, *FindModelPreset("llama-2-70b"), LayoutUse::kInference).ok());
}

TEST(ParallelLayoutTest, ExpertParallelMustDivideDataParallel) {
  ParallelLayout layout;
  layout.dp = 6;
  layout.ep = 4;
  ExpectError(
      ValidateParallelLayout(layout, *FindModelPreset("mixtral-8x7b"), LayoutUse::kTraining),
      {"ep = 4", "dp = 6"});
}

TEST(ModelPresetsTest, UnknownPresetListsKnownOnes) {
  absl::StatusOr<ModelSpec> spec = FindModelPreset("llama-9-1b");
  ExpectError(spec.status(), {"llama-9-1b", "llama-2-7b", "gpt2-xl"});
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound);
}

TEST(ModelSpecJsonTest, OwnSchemaRoundTripsAPreset) {
  absl::StatusOr<ModelSpec> spec = ModelSpecFromJson(R"({
    "name": "my-llama", "num_layers": 32, "hidden_size": 4096, "num_heads": 32,
    "num_kv_heads": 32, "ffn_size": 11008, "gated_mlp": true, "vocab_size": 32000,
    "tied_embeddings": false, "norm": "rmsnorm", "linear_biases": false,
    "position_embedding": "rotary"})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "my-llama");
  EXPECT_EQ(CountParameters(*spec)->total, 6738415616);
}

TEST(ModelSpecJsonTest, BaseStartsFromAPreset) {
  absl::StatusOr<ModelSpec> spec =
      ModelSpecFromJson(R"({"base": "llama-2-7b", "num_kv_heads": 8, "name": "gqa-7b"})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->kv_heads(), 8);
  EXPECT_EQ(spec->hidden_size, 4096);
}

TEST(ModelSpecJsonTest, ErrorsNameTheKey) {
  ExpectError(ModelSpecFromJson(R"({"base": "llama-2-7b", "hidden_size": -5})").status(),
              {"hidden_size", "-5"});
  ExpectError(ModelSpecFromJson(R"({"base": "llama-2-7b", "num_layers": 2.5})").status(),
              {"num_layers", "2.5"});
  ExpectError(ModelSpecFromJson(R"({"base": "llama-2-7b", "gated_mlp": "yes"})").status(),
              {"gated_mlp", "yes"});
  ExpectError(ModelSpecFromJson(R"({"base": "llama-2-7b", "hiden_size": 5})").status(),
              {"unknown field", "hiden_size"});
  ExpectError(ModelSpecFromJson(R"({"base": "nope"})").status(), {"base", "nope"});
  ExpectError(ModelSpecFromJson(R"({"base": "llama-2-7b", "norm": "batchnorm"})").status(),
              {"norm", "batchnorm"});
  ExpectError(ModelSpecFromJson(R"({"base": "llama-2-7b", "num_heads": 48})").status(),
              {"num_heads = 48", "hidden_size = 4096"});
  ExpectError(ModelSpecFromJson(R"({"base": "llama-2-70b", "num_kv_heads": 5})").status(),
              {"num_kv_heads = 5"});
  ExpectError(ModelSpecFromJson(R"([1, 2])").status(), {"JSON object", "array"});
}

TEST(ModelSpecJsonTest, BadJsonReportsLineColumnAndOffset) {
  ExpectError(ModelSpecFromJson("{\n  \"num_layers\": 32,\n}").status(),
              {"line 3, column 1 (offset 22)", "expected string literal"});
  ExpectError(ModelSpecFromJson("{\"a\": 1} x").status(), {"offset 9", "expected end of input"});
  ExpectError(ModelSpecFromJson("{\"a\": 01}").status(), {"line 1"});
  ExpectError(ModelSpecFromJson("{\"a\": 1, \"b\": 0, \"a\": 2}").status(),
              {"line 1, column 20 (offset 19)", "duplicate key \"a\""});
  ExpectError(ModelSpecFromJson("{\"a\": \"\\q\"}").status(), {"after backslash"});
  ExpectError(ModelSpecFromJson("").status(), {"unexpected end of input"});
  ExpectError(ModelSpecFromJson("{\"a\": 1e999}").status(), {"offset 11", "number overflow"});
  ExpectError(ModelSpecFromJson("{\"a\": 1} // note").status(), {"line 1"});
}

// A quoted key or value is a short escaped excerpt, however long or binary the text.
TEST(ModelSpecJsonTest, ErrorsQuoteShortExcerpts) {
  const std::string key(100000, '\x01');
  const std::string json = "{\"" + std::string(5000, 'k') + "\": 1}";
  const absl::Status unknown = ModelSpecFromJson(json).status();
  // The excerpt (40 bytes) and the list of the known fields.
  EXPECT_LT(unknown.message().size(), 1000u) << unknown.message().substr(0, 200);
  const absl::Status type =
      ModelSpecFromJson("{\"model_type\": \"" + std::string(5000, 'x') + "\"}").status();
  EXPECT_LT(type.message().size(), 400u);
  EXPECT_NE(type.message().find("xxx...\""), std::string::npos) << type.message();
}

// Every number of keys is linear work: 2 x 10^5 distinct keys parse; a duplicate among them is
// found and named (the 10^6-key figure is a benchmark, bench/RESULTS.md).
TEST(ModelSpecJsonTest, ManyKeysAndADuplicateAmongThem) {
  std::string json = R"({"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12)";
  for (int i = 0; i < 200000; ++i) json += ", \"k" + std::to_string(i) + "\": 0";
  absl::StatusOr<ModelSpec> spec = ModelSpecFromJson(json + "}");
  EXPECT_TRUE(spec.ok()) << spec.status();
  ExpectError(ModelSpecFromJson(json + ", \"k123\": 1}").status(), {"duplicate key \"k123\""});
}

// The issue's reproducer: /dev/zero (and any stream without end) stops at the bound.
TEST(ModelSpecJsonTest, AFileWithoutEndStopsAtTheBound) {
  ExpectError(LoadModelSpecFile("/dev/zero").status(), {"/dev/zero", "larger than the 64 MiB"});
  ExpectError(LoadModelSpecFile("/").status(), {"'/'", "directory"});
}

// Without intermediate_size, transformers' class default fits one model size only: refused.
TEST(ModelSpecJsonTest, ALlamaConfigWithoutIntermediateSizeIsRefused) {
  ExpectError(ModelSpecFromJson(R"({"model_type": "llama", "hidden_size": 4096,
      "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
      "vocab_size": 128256})")
                  .status(),
              {"intermediate_size | n_inner | ffn_dim | ffn_hidden_size: missing from this "
               "\"llama\" config",
               "class default"});
}

TEST(ModelSpecJsonTest, ReadsHuggingFaceLlamaConfig) {
  // Abridged meta-llama/Meta-Llama-3-8B config.json.
  absl::StatusOr<ModelSpec> spec = ModelSpecFromJson(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "hidden_act": "silu",
    "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 8192,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 128256})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(CountParameters(*spec)->total, 8030261248);
}

TEST(ModelSpecJsonTest, ReadsHuggingFaceGpt2AndOptConfigs) {
  absl::StatusOr<ModelSpec> gpt2 = ModelSpecFromJson(
      R"({"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "n_inner": null,
          "n_positions": 1024, "vocab_size": 50257})");
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();
  EXPECT_EQ(CountParameters(*gpt2)->total, 124439808);
  absl::StatusOr<ModelSpec> opt = ModelSpecFromJson(
      R"({"model_type": "opt", "num_hidden_layers": 12, "hidden_size": 768,
          "num_attention_heads": 12, "ffn_dim": 3072, "vocab_size": 50272,
          "max_position_embeddings": 2048, "word_embed_proj_dim": 768,
          "do_layer_norm_before": true})");
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ(CountParameters(*opt)->total, 125239296);
  ExpectError(ModelSpecFromJson(R"({"model_type": "opt", "num_hidden_layers": 24,
      "hidden_size": 1024, "num_attention_heads": 16, "ffn_dim": 4096, "vocab_size": 50272,
      "max_position_embeddings": 2048, "word_embed_proj_dim": 512})")
                  .status(),
              {"word_embed_proj_dim"});
  ExpectError(ModelSpecFromJson(R"({"model_type": "t5"})").status(), {"model_type", "t5"});
}

TEST(ModelSpecJsonTest, LoadsFileAndNamesMissingPath) {
  const std::string path = ::testing::TempDir() + "/fragscope_spec.json";
  {
    std::ofstream file(path);
    file << R"({"base": "gpt2-small", "name": "from-file"})";
  }
  absl::StatusOr<ModelSpec> spec = LoadModelSpecFile(path);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "from-file");
  std::remove(path.c_str());
  ExpectError(LoadModelSpecFile("/nonexistent/spec.json").status(), {"/nonexistent/spec.json"});
}

TEST(JsonValueTest, ParsesEscapesAndNesting) {
  absl::StatusOr<nlohmann::json> value =
      ParseJson(R"({"s": "a\"b\\c\u00e9\ud83d\ude00", "n": -1.5e3, "a": [true, false, null]})");
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(value->at("s"), "a\"b\\c\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(value->at("n").get<double>(), -1500);
  ASSERT_EQ(value->at("a").size(), 3u);
  EXPECT_TRUE(value->at("a")[2].is_null());
}

TEST(JsonValueTest, RejectsDeepNesting) {
  const std::string deep = std::string(100, '[') + std::string(100, ']');
  EXPECT_FALSE(ParseJson(deep).ok());
}

}  // namespace
}  // namespace fragscope::estimator
