// --activation-model torch-autocast against what an H100 measured (NVIDIA H100 80GB HBM3, torch
// 2.11.0+cu130, transformers 5.17.0, 2026-11-23; scripts/gpu/estimator_accuracy.py and
// activation_probe.py, figures in estimator/README.md "Measured accuracy"). "Derivation" models
// are those whose saved tensors the formula was written from; "holdout" ones were measured after.
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

#include "estimator/autocast_activations.h"
#include "estimator/model_presets.h"
#include "estimator/model_spec_json.h"
#include "estimator/training_memory.h"
#include "tests/testing/status_matchers.h"

namespace fragscope::estimator {
namespace {

constexpr char kGpt2Small[] = R"({"model_type": "gpt2", "n_layer": 12, "n_embd": 768,
                                  "n_head": 12})";
constexpr char kGpt2Medium[] = R"({"model_type": "gpt2", "n_layer": 24, "n_embd": 1024,
                                   "n_head": 16})";
constexpr char kGpt2AtenGelu[] = R"({"model_type": "gpt2", "n_layer": 12, "n_embd": 768,
                                     "n_head": 12, "activation_function": "gelu_pytorch_tanh"})";
constexpr char kLlama1b[] = R"({"model_type": "llama", "hidden_size": 2048,
    "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32,
    "num_key_value_heads": 4, "vocab_size": 32000, "tie_word_embeddings": false})";
constexpr char kMistral03b[] = R"({"model_type": "mistral", "hidden_size": 1024,
    "intermediate_size": 3584, "num_hidden_layers": 16, "num_attention_heads": 16,
    "num_key_value_heads": 8, "vocab_size": 32000, "tie_word_embeddings": false})";

ModelSpec Spec(const std::string& json) {
  absl::StatusOr<ModelSpec> spec = ModelSpecFromJson(json);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : ModelSpec{};
}

// The accuracy script's configuration: bf16 autocast, AdamW, SDPA (flash), one GPU, two cuBLAS
// workspaces of 32 MiB, no CUDA context (the allocator does not see it).
TrainingConfig Autocast(int64_t seq, int64_t batch, bool dropout) {
  TrainingConfig config;
  config.activation_model = ActivationModel::kTorchAutocast;
  config.seq_len = seq;
  config.micro_batch = batch;
  config.flash_attention = true;
  config.dropout = dropout;
  config.overheads.cuda_context_bytes = 0;
  config.overheads.workspace_bytes = 64.0 * (1 << 20);
  config.optimizer_impl = OptimizerImpl::kFused;  // the measured runs' AdamW
  return config;
}

double SbhUnits(const ModelSpec& spec, const TrainingConfig& config) {
  return AutocastBytesPerLayer(spec, config) /
         static_cast<double>(config.seq_len * config.micro_batch * spec.hidden_size);
}

TEST(AutocastActivationsTest, PerLayerBytesMatchTheSavedTensorsMeasured) {
  // Formula (bytes per s b h) vs the measured saved tensors of block 0 without the 16-bit weight
  // copies (the measured excess is the rotary tables and SDPA's logsumexp).
  EXPECT_DOUBLE_EQ(SbhUnits(Spec(kGpt2Small), Autocast(512, 8, true)), 90);     // 90.08
  EXPECT_DOUBLE_EQ(SbhUnits(Spec(kGpt2AtenGelu), Autocast(512, 8, true)), 42);  // 42.08 holdout
  EXPECT_DOUBLE_EQ(SbhUnits(Spec(kLlama1b), Autocast(1024, 4, false)), 52.5);   // 52.63
  EXPECT_DOUBLE_EQ(SbhUnits(Spec(kMistral03b), Autocast(2048, 4, false)), 60);  // 60.20 holdout
}

// A two-layer config of tests/data/estimator/configs (the accuracy test's), read as a spec.
ModelSpec TwoLayerSpec(const std::string& type) {
  const std::string path =
      absl::StrCat(FRAGSCOPE_ESTIMATOR_TEST_DIR, "/../data/estimator/configs/", type, ".json");
  std::ifstream file(path);
  EXPECT_TRUE(file.good()) << path;
  std::stringstream text;
  text << file.rdbuf();
  absl::StatusOr<ModelSpec> spec = ModelSpecFromJson(text.str());
  EXPECT_TRUE(spec.ok()) << path << ": " << spec.status();
  return spec.ok() ? *spec : ModelSpec{};
}

// The last layer's saved tensors of each type (without the 16-bit weight copies), as
// scripts/estimator/saved_tensors_probe.py listed them under the predictor (seq S, micro-batch 1,
// no dropout); the excess over the formula is SDPA's logsumexp and the routing's small tensors.
TEST(AutocastActivationsTest, OtherArchitecturesMatchTheSavedTensorsListed) {
  struct Listed {
    const char* type;
    int64_t seq;
    double bytes;
  };
  const Listed listed[] = {
      {"mixtral", 2048, 1317531704},   // MoE: router, fp32 experts
      {"qwen2_moe", 1000, 283078264},  // MoE with a gated shared expert
      {"qwen3_moe", 1000, 302640536},  {"olmoe", 1000, 483944280},
      {"granitemoe", 1000, 549082056}, {"qwen3", 2048, 747388952},  // per-head q/k norms
      {"falcon", 2048, 1471430672},  // SDPA's math kernel, fp32 scores
      {"gemma", 2048, 633511960},      {"gemma2", 1000, 182868888},  // four norms per layer
      {"cohere", 1000, 426244024},                                   // Cohere's Python LayerNorm
  };
  for (const Listed& l : listed) {
    SCOPED_TRACE(l.type);
    TrainingConfig config = Autocast(l.seq, 1, false);
    const double formula = AutocastBytesPerLayer(TwoLayerSpec(l.type), config);
    EXPECT_NEAR(formula / l.bytes, 1.0, 0.002) << formula;
    EXPECT_LE(formula, l.bytes);
  }
  // DeepSeek-V3's MLA and MoE layer (its first layer is dense): the activations_moe term.
  ASSERT_OK_AND_ASSIGN(MemoryEstimate deepseek,
                       EstimateTraining(TwoLayerSpec("deepseek_v3"), Autocast(1000, 1, false)));
  EXPECT_NEAR(deepseek.Find("activations_moe")->value / 1138409328.0, 1.0, 0.002);
}

// The predictor's peaks (tests/data/estimator/causal_lm_predictions.json, fused AdamW, seq 2048,
// second step) of the two types whose peak is neither the backward's start nor the optimizer
// step.
TEST(AutocastActivationsTest, TiedAndScoreStoringModelsPeakInsideTheBackward) {
  TrainingConfig config = Autocast(2048, 1, false);
  // Cohere (tied, V 256000, h 8192): the embedding lookup's fp32 gradient beside the output
  // layer's at the end of the backward.
  ASSERT_OK_AND_ASSIGN(MemoryEstimate cohere, EstimateTraining(TwoLayerSpec("cohere"), config));
  EXPECT_EQ(cohere.step_peaks->peak, StepMoment::kBackwardEnd);
  EXPECT_DOUBLE_EQ(cohere.Find("embedding_gradient")->value, 4.0 * 256000 * 8192);
  EXPECT_NEAR(cohere.DeviceBytes() / 68384353280.0, 1.0, 0.01);
  // Falcon (SDPA's math kernel): two fp32 score-sized temporaries in the last layer's softmax
  // backward.
  ASSERT_OK_AND_ASSIGN(MemoryEstimate falcon, EstimateTraining(TwoLayerSpec("falcon"), config));
  EXPECT_EQ(falcon.step_peaks->peak, StepMoment::kAttentionBackward);
  EXPECT_TRUE(falcon.Find("attention_backward")->at_peak);
  EXPECT_FALSE(falcon.Find("loss_backward")->at_peak);
  EXPECT_NEAR(falcon.DeviceBytes() / 16183832064.0, 1.0, 0.01);
  // A short sequence in eager attention frees more there than it allocates (GPT-2 small, seq 24,
  // micro-batch 96: 13 MB less): the moment adds nothing, never less.
  ASSERT_OK_AND_ASSIGN(ModelSpec gpt2, FindModelPreset("gpt2-small"));
  TrainingConfig eager = Autocast(24, 96, false);
  eager.flash_attention = false;
  ASSERT_OK_AND_ASSIGN(MemoryEstimate short_gpt2, EstimateTraining(gpt2, eager));
  EXPECT_EQ(short_gpt2.Find("attention_backward")->value, 0);
  EXPECT_NE(short_gpt2.step_peaks->peak, StepMoment::kAttentionBackward);
  // Untied, with flash attention: neither term.
  ASSERT_OK_AND_ASSIGN(MemoryEstimate llama, EstimateTraining(TwoLayerSpec("llama"), config));
  EXPECT_EQ(llama.Find("embedding_gradient"), nullptr);
  EXPECT_EQ(llama.Find("attention_backward"), nullptr);
  EXPECT_EQ(llama.step_peaks->attention_backward, 0);
}

TEST(AutocastActivationsTest, AReluMlpKeepsOneTensor) {
  ModelSpec opt = TwoLayerSpec("opt");
  ASSERT_EQ(opt.activation, "relu");
  TrainingConfig config = Autocast(2048, 1, false);
  const double relu = AutocastBytesPerLayer(opt, config);
  opt.activation = "gelu";
  EXPECT_DOUBLE_EQ(AutocastBytesPerLayer(opt, config) - relu,
                   2.0 * 2048 * static_cast<double>(opt.ffn()));
}

struct Measured {
  const char* name;
  const char* json;
  int64_t seq;
  int64_t batch;
  bool dropout;
  double peak_allocated;  // torch.cuda.max_memory_allocated() over steps 2-3
  double model_states;    // parameter, gradient and AdamW state tensors, 512 B-rounded
};

TEST(AutocastActivationsTest, TotalsMatchThePeaksMeasuredOnAnH100) {
  const Measured runs[] = {
      {"gpt2-124m", kGpt2Small, 512, 8, true, 7723440128, 1991112704},
      {"gpt2-124m", kGpt2Small, 1024, 8, true, 13611768832, 1991112704},
      {"gpt2-355m", kGpt2Medium, 512, 8, true, 16602981888, 5677320192},
      {"gpt2-355m", kGpt2Medium, 1024, 8, true, 28167562752, 5677320192},
      {"llama-1.1b", kLlama1b, 1024, 4, false, 26696127488, 17600877056},
      {"llama-1.1b", kLlama1b, 2048, 4, false, 38053499904, 17600877056},
      {"gpt2-124m holdout", kGpt2Small, 768, 4, true, 6232426496, 1991112704},
      {"gpt2-124m gelu_pytorch_tanh holdout", kGpt2AtenGelu, 512, 8, true, 5920027136, 1991112704},
      {"mistral-0.3b holdout", kMistral03b, 2048, 4, false, 15450980864, 4673070592},
  };
  for (const Measured& run : runs) {
    SCOPED_TRACE(absl::StrCat(run.name, " seq ", run.seq, " x ", run.batch));
    ASSERT_OK_AND_ASSIGN(
        MemoryEstimate e,
        EstimateTraining(Spec(run.json), Autocast(run.seq, run.batch, run.dropout)));
    EXPECT_NEAR(e.DeviceBytes() / run.peak_allocated, 1.0, 0.01);
    const double states = e.Find("gradients")->value + e.Find("master_weights")->value +
                          e.Find("optimizer_states")->value;
    EXPECT_NEAR(states / run.model_states, 1.0, 0.001);
  }
}

TEST(AutocastActivationsTest, GradientsAreOffThePeakUnlessPersistent) {
  TrainingConfig config = Autocast(512, 8, true);
  ASSERT_OK_AND_ASSIGN(MemoryEstimate freed, EstimateTraining(Spec(kGpt2Small), config));
  EXPECT_FALSE(freed.Find("gradients")->at_peak);
  config.persistent_gradients = true;
  ASSERT_OK_AND_ASSIGN(MemoryEstimate kept, EstimateTraining(Spec(kGpt2Small), config));
  EXPECT_TRUE(kept.Find("gradients")->at_peak);
  EXPECT_DOUBLE_EQ(kept.DeviceBytes() - freed.DeviceBytes(), 124439808.0 * 4);
  // The Korthikanti model always counts them and refuses the flag.
  config.activation_model = ActivationModel::kKorthikanti;
  EXPECT_FALSE(EstimateTraining(Spec(kGpt2Small), config).ok());
}

TEST(AutocastActivationsTest, OutputAndLossTermsFollowTheVocabulary) {
  ASSERT_OK_AND_ASSIGN(MemoryEstimate e,
                       EstimateTraining(Spec(kGpt2Small), Autocast(512, 8, true)));
  const double sb = 512.0 * 8;
  EXPECT_DOUBLE_EQ(e.Find("activations_output")->value, 4 * sb * 50257 + (4 + 2) * sb * 768);
  EXPECT_DOUBLE_EQ(e.Find("loss_backward")->value, 8 * sb * 50257);
  EXPECT_DOUBLE_EQ(e.Find("activations_embedding")->value, 8 * sb + sb * 768);
}

TEST(AutocastActivationsTest, WithoutFlashAttentionTheScoresAreStored) {
  TrainingConfig config = Autocast(512, 8, true);
  const double flash = AutocastBytesPerLayer(Spec(kGpt2Small), config);
  config.flash_attention = false;
  // a s^2 b (4 + E + m): fp32 softmax, its 16-bit copy, the dropout mask.
  EXPECT_DOUBLE_EQ(AutocastBytesPerLayer(Spec(kGpt2Small), config) - flash,
                   12.0 * 512 * 512 * 8 * (4 + 2 + 1));
}

TEST(AutocastActivationsTest, WhatItDoesNotDescribeIsAnErrorNamingTheFlag) {
  const ModelSpec spec = Spec(kLlama1b);
  auto error = [&](TrainingConfig config) {
    absl::StatusOr<MemoryEstimate> e = EstimateTraining(spec, config);
    return e.ok() ? std::string("ok") : std::string(e.status().message());
  };
  TrainingConfig config = Autocast(1024, 4, false);
  config.layout.tp = 2;
  EXPECT_NE(error(config).find("tp = 2 without sequence parallelism"), std::string::npos)
      << error(config);
  config = Autocast(1024, 4, false);
  config.recompute = Recompute::kSelective;
  EXPECT_NE(error(config).find("recompute selective"), std::string::npos) << error(config);
  config = Autocast(1024, 4, false);
  config.precision = Precision::kFp32;
  EXPECT_NE(error(config).find("precision fp32"), std::string::npos) << error(config);
  config = Autocast(1024, 4, false);
  config.layout.pp = 2;
  config.layout.tp = 2;
  config.layout.sequence_parallel = true;
  EXPECT_NE(error(config).find("tp > 1 with pp > 1 is not modelled"), std::string::npos)
      << error(config);
}

TEST(AutocastActivationsTest, SpecFieldsComeFromTheConfigOrTheOwnSchema) {
  EXPECT_TRUE(Spec(kGpt2Small).fused_qkv);
  EXPECT_TRUE(Spec(kGpt2Small).python_gelu);
  EXPECT_FALSE(Spec(kGpt2AtenGelu).python_gelu);
  EXPECT_FALSE(Spec(kLlama1b).fused_qkv);
  EXPECT_FALSE(Spec(kLlama1b).python_gelu);
  const ModelSpec own = Spec(R"({"base": "llama-2-7b", "fused_qkv": true, "python_gelu": true})");
  EXPECT_TRUE(own.fused_qkv);
  EXPECT_TRUE(own.python_gelu);
  EXPECT_FALSE(ModelSpecFromJson(R"({"base": "gpt2", "fused_qkv": 1})").ok());
}

// Gemma 2's cap * tanh(logits / cap) saves the tanh's 16-bit output: E s b V more.
TEST(AutocastActivationsTest, LogitSoftcappingKeepsTheTanhOutput) {
  const std::string base =
      R"({"model_type": "gemma2", "num_hidden_layers": 2, "hidden_size": 256,
          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
          "intermediate_size": 512, "vocab_size": 1000, "final_logit_softcapping": )";
  const ModelSpec capped = Spec(base + "30.0}");
  const ModelSpec plain = Spec(base + "null}");
  EXPECT_TRUE(capped.logit_softcapping);
  EXPECT_FALSE(plain.logit_softcapping);
  auto output = [](const ModelSpec& spec) {
    auto terms = AutocastActivationTerms(spec, Autocast(128, 2, false));
    EXPECT_TRUE(terms.ok()) << terms.status();
    for (const Term& t : *terms) {
      if (t.key == "activations_output") return t.value;
    }
    return 0.0;
  };
  EXPECT_DOUBLE_EQ(output(capped) - output(plain), 2.0 * 128 * 2 * 1000);
  const auto bad = ModelSpecFromJson(base + R"("high"})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("final_logit_softcapping"), std::string::npos)
      << bad.status();
}

}  // namespace
}  // namespace fragscope::estimator
