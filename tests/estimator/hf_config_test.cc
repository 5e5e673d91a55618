// The Hugging Face config reader: unknown model types read as Llama-style decoders with the
// assumption stated, missing and malformed keys named with the model type, structures the spec
// cannot describe refused by name. Exact counts of known types: hf_parameter_counts_test.cc.
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/estimator/estimate_run.h"

#include "estimator/model_presets.h"
#include "estimator/model_spec_json.h"
#include "estimator/parallel_layout.h"
#include "estimator/parameter_count.h"

namespace fragscope::estimator {
namespace {

void ExpectError(const absl::Status& status, std::initializer_list<std::string> pieces) {
  ASSERT_FALSE(status.ok());
  for (const std::string& piece : pieces) {
    EXPECT_NE(std::string(status.message()).find(piece), std::string::npos)
        << "'" << piece << "' not in: " << status.message();
  }
}

// Llama-3-8B's sizes under another model_type.
constexpr char kLlama3Keys[] = R"("hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "vocab_size": 128256, "tie_word_embeddings": false)";

TEST(HfConfigTest, UnknownTypeReadsAsLlamaStyleWithTheAssumptionStated) {
  absl::StatusOr<ModelSpec> spec =
      ModelSpecFromJson(std::string(R"({"model_type": "foo", )") + kLlama3Keys + "}");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(CountParameters(*spec)->total, 8030261248);
  ASSERT_EQ(spec->assumptions.size(), 1u);
  EXPECT_EQ(spec->assumptions[0],
            "model_type \"foo\" is not known: read as a Llama-style decoder (gated MLP, RMSNorm, "
            "no biases unless attention_bias/mlp_bias say so, untied output layer)");
  EXPECT_EQ(spec->model_type, "foo");
}

TEST(HfConfigTest, UnknownTypeReadsItsBiasExpertAndMlaKeys) {
  absl::StatusOr<ModelSpec> spec = ModelSpecFromJson(std::string(R"({"model_type": "bar",
      "attention_bias": true, "num_local_experts": 8, "num_experts_per_tok": 2, )") +
                                                     kLlama3Keys + "}");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->qkv_bias);
  EXPECT_TRUE(spec->attention_out_bias);
  EXPECT_FALSE(spec->mlp_bias);
  EXPECT_EQ(spec->num_experts, 8);
  EXPECT_EQ(spec->moe_layers(), 32);
}

TEST(HfConfigTest, TheEstimateCarriesTheAssumption) {
  const std::string path = ::testing::TempDir() + "/fragscope_unknown_type.json";
  std::ofstream(path) << R"({"model_type": "foo", )" << kLlama3Keys << "}";
  for (const char* mode : {"--train", "--context"}) {
    std::vector<std::string> args = {"--model-json", path, mode};
    if (std::string(mode) == "--context") args.push_back("2048");
    const ::fragscope::testing::EstimateResult r = ::fragscope::testing::RunEstimate(args);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(::fragscope::testing::Contains(
        r.out, "model_type \"foo\" is not known: read as a Llama-style decoder"))
        << r.out;
  }
}

TEST(HfConfigTest, AMissingKeyNamesItsAliasesAndTheModelType) {
  ExpectError(ModelSpecFromJson(R"({"model_type": "foo", "hidden_size": 64,
      "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100})")
                  .status(),
              {"intermediate_size", "missing from this \"foo\" config", "class default",
               "is not known: read as a Llama-style decoder"});
  ExpectError(ModelSpecFromJson(R"({"model_type": "qwen2", "hidden_size": 64,
      "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100})")
                  .status(),
              {"num_hidden_layers | n_layer | num_layers: missing from this \"qwen2\" config"});
  ExpectError(ModelSpecFromJson(R"({"model_type": "gpt_neo", "hidden_size": 64,
      "num_heads": 4, "num_layers": 2, "vocab_size": 100})")
                  .status(),
              {"n_positions | max_position_embeddings", "\"gpt_neo\"", "learned position"});
  ExpectError(ModelSpecFromJson(R"({"model_type": "mixtral", "num_local_experts": 8, )" +
                                std::string(kLlama3Keys) + "}")
                  .status(),
              {"num_experts_per_tok: missing from this \"mixtral\" config"});
  ExpectError(ModelSpecFromJson(R"({"model_type": "deepseek_v3", "kv_lora_rank": 512,
      "qk_rope_head_dim": 64, "v_head_dim": 128, )" +
                                std::string(kLlama3Keys) + "}")
                  .status(),
              {"qk_nope_head_dim: missing", "MLA"});
}

TEST(HfConfigTest, MalformedValuesNameTheKey) {
  ExpectError(ModelSpecFromJson(R"({"model_type": "llama", "attention_bias": "yes", )" +
                                std::string(kLlama3Keys) + "}")
                  .status(),
              {"attention_bias: expected true or false", "\"yes\""});
  ExpectError(ModelSpecFromJson(R"({"model_type": "qwen2_moe", "num_experts": 4,
      "num_experts_per_tok": 2, "mlp_only_layers": 3, )" +
                                std::string(kLlama3Keys) + "}")
                  .status(),
              {"mlp_only_layers: expected a list"});
  ExpectError(ModelSpecFromJson(R"({"model_type": "qwen2_moe", "num_experts": 4,
      "num_experts_per_tok": 2, "decoder_sparse_step": 0, )" +
                                std::string(kLlama3Keys) + "}")
                  .status(),
              {"decoder_sparse_step"});
  ExpectError(ModelSpecFromJson(R"({"model_type": "llama", "hidden_act": 3, )" +
                                std::string(kLlama3Keys) + "}")
                  .status(),
              {"hidden_act: expected a string"});
}

TEST(HfConfigTest, StructuresOutsideTheSpecAreRefusedByName) {
  ExpectError(ModelSpecFromJson(R"({"model_type": "t5", "is_encoder_decoder": true,
      "d_model": 512, "num_layers": 6, "num_heads": 8, "vocab_size": 32128})")
                  .status(),
              {"is_encoder_decoder", "\"t5\"", "encoder-decoder"});
  ExpectError(ModelSpecFromJson(R"({"model_type": "opt", "num_hidden_layers": 24,
      "hidden_size": 1024, "num_attention_heads": 16, "ffn_dim": 4096, "vocab_size": 50272,
      "max_position_embeddings": 2048, "do_layer_norm_before": false})")
                  .status(),
              {"do_layer_norm_before = false", "post-LayerNorm"});
}

TEST(HfConfigTest, QwenMoeLayersFollowSparseStepAndMlpOnlyLayers) {
  // 8 layers, every 2nd sparse: layers 1, 3, 5, 7; mlp_only_layers removes 3 (and 2, already
  // dense, and 40, past the end): 3 MoE layers, 5 dense.
  absl::StatusOr<ModelSpec> spec = ModelSpecFromJson(R"({"model_type": "qwen2_moe",
      "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 8,
      "intermediate_size": 128, "moe_intermediate_size": 32, "vocab_size": 100,
      "num_experts": 4, "num_experts_per_tok": 2, "shared_expert_intermediate_size": 48,
      "decoder_sparse_step": 2, "mlp_only_layers": [2, 3, 40]})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->dense_layers, 5);
  EXPECT_EQ(spec->moe_layers(), 3);
  EXPECT_TRUE(spec->shared_expert_gate);
  absl::StatusOr<ParameterCount> count = CountParameters(*spec);
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(count->mlp_weights, 3 * 64 * 128);
  EXPECT_EQ(count->expert_parameters, 4 * 3 * 64 * 32);
  EXPECT_EQ(count->shared_expert, 3 * 64 * 48);
  EXPECT_EQ(count->shared_expert_gate, 64);
}

TEST(HfConfigTest, OwnSchemaTakesTheStructureFields) {
  absl::StatusOr<ModelSpec> spec = ModelSpecFromJson(R"({"base": "llama-2-7b",
      "qk_norm": "per_head", "norms_per_layer": 4, "linear_biases": true, "mlp_bias": false,
      "lm_head_bias": true})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<ParameterCount> count = CountParameters(*spec);
  ASSERT_TRUE(count.ok());
  const int64_t h = 4096, v = 32000, l = 32;
  // Llama-2-7B + q/k norms 2 x 128, two more norms, Q/K/V/O biases, an output bias.
  EXPECT_EQ(count->total, 6738415616 + l * (2 * 128 + 2 * h + 3 * h + h) + v);
  ExpectError(ModelSpecFromJson(R"({"base": "llama-2-7b", "qk_norm": "both"})").status(),
              {"qk_norm: unknown q/k norm 'both'"});
  ExpectError(ModelSpecFromJson(R"({"base": "llama-2-7b", "shared_expert_ffn_size": 8})").status(),
              {"shared_expert_ffn_size = 8 needs num_experts > 0"});
  ExpectError(ModelSpecFromJson(R"({"base": "llama-2-7b", "q_lora_rank": 8})").status(),
              {"q_lora_rank needs multi-head latent attention"});
  ExpectError(
      ModelSpecFromJson(R"({"base": "llama-2-7b", "kv_lora_rank": 8, "head_dim": 0})").status(),
      {"head_dim"});
  ExpectError(ModelSpecFromJson(R"({"base": "mixtral-8x7b", "dense_layers": 33})").status(),
              {"dense_layers = 33 exceeds num_layers = 32"});
}

TEST(HfConfigTest, PipelineStageZeroTakesTheDenseLayersFirst) {
  absl::StatusOr<ModelSpec> spec =
      ModelSpecFromJson(R"({"base": "mixtral-8x7b", "dense_layers": 3})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<ParameterCount> count = CountParameters(*spec);
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(count->dense_layers, 3);
  EXPECT_EQ(count->moe_layers, 29);
  const LayerMix first_eight = FirstLayers(*count, 8);
  EXPECT_EQ(first_eight.dense, 3);
  EXPECT_EQ(first_eight.moe, 5);
  const LayerMix first_two = FirstLayers(*count, 2);
  EXPECT_EQ(first_two.dense, 2);
  EXPECT_EQ(first_two.moe, 0);
  // pp 4: stage 0 holds layers 0-7, the 3 dense ones and 5 with experts (ep 2 halves those).
  ParallelLayout layout;
  layout.pp = 4;
  layout.dp = 2;
  layout.ep = 2;
  ASSERT_TRUE(ValidateParallelLayout(layout, *spec, LayoutUse::kTraining).ok());
  const ParameterShard shard = ShardParameters(*spec, *count, layout);
  EXPECT_EQ(shard.expert, 5.0 * static_cast<double>(count->expert_parameters) / 2.0);
  EXPECT_EQ(shard.tensor_parallel, static_cast<double>(8 * count->attention_weights +
                                                       3 * count->mlp_weights + count->embedding));
  EXPECT_EQ(shard.replicated, static_cast<double>(8 * count->layer_norms + 5 * count->router));
}

}  // namespace
}  // namespace fragscope::estimator
