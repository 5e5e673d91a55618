// The torch-autocast terms of tensor- and pipeline-parallel ranks (autocast_parallel.h), LoRA
// (lora_activations.h) and a generate's autocast weight copies (inference_memory.h), against
// fragscope's predictor (torch 2.11, transformers 5.17, kernels as on an H100). The measured
// figures are the activation roles (saved_activations + temporaries) at the phase's demand peak,
// read with `fragscope analyze LOG --json -`; the terms were written from this small Llama's
// predictions (the fit), and tests/estimator/parallel_terms_check.py checks them on other models.
#include <cmath>
#include <string>

#include "gtest/gtest.h"

#include "estimator/autocast_activations.h"
#include "estimator/autocast_parallel.h"
#include "estimator/inference_memory.h"
#include "estimator/lora.h"
#include "estimator/model_spec_json.h"
#include "estimator/parallel_layout.h"
#include "estimator/parameter_count.h"
#include "estimator/training_memory.h"
#include "tests/testing/status_matchers.h"

namespace fragscope::estimator {
namespace {

constexpr double kMiB = 1 << 20;

// The fit model: h 512, 4 layers, 8 heads of 128, 4 key/value heads, f 1536, V 32000.
constexpr char kSmallLlama[] = R"({"model_type": "llama", "hidden_size": 512,
    "intermediate_size": 1536, "num_hidden_layers": 4, "num_attention_heads": 8,
    "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 32000,
    "tie_word_embeddings": false})";

ModelSpec Spec(const std::string& json) {
  absl::StatusOr<ModelSpec> spec = ModelSpecFromJson(json);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : ModelSpec{};
}

// The predictor's step: bf16 autocast, SDPA, no dropout, seq 512, micro-batch 2.
TrainingConfig Predicted() {
  TrainingConfig config;
  config.activation_model = ActivationModel::kTorchAutocast;
  config.seq_len = 512;
  config.micro_batch = 2;
  config.flash_attention = true;
  config.dropout = false;
  return config;
}

// The estimate's activation category at its backward start, as analysis/explain/model_gap.cc sorts
// terms: the 16-bit weight copies (full fine-tuning), the activation terms, the loss.
double ActivationBytes(const MemoryEstimate& estimate, bool weights_are_casts = true) {
  double bytes = 0;
  for (const Term& t : estimate.terms) {
    const bool activation = t.key.rfind("activations", 0) == 0 || t.key == "loss_backward" ||
                            (weights_are_casts && t.key == "weights");
    if (activation && t.at_backward_start) bytes += t.value;
  }
  return bytes;
}

double Within(double estimated, double measured) { return std::abs(estimated / measured - 1); }

TEST(AutocastParallelTest, TensorParallelShardsAllButTheGatheredInputsCasts) {
  const ModelSpec spec = Spec(kSmallLlama);
  TrainingConfig config = Predicted();
  const double one = AutocastBytesPerLayer(spec, config);
  const double casts = 2.0 * 512 * 2 * 512 * 5;  // q, k, v, gate, up: E s b h each
  config.layout.tp = 2;
  config.layout.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(AutocastBytesPerLayer(spec, config), casts + (one - casts) / 2);
  // Measured per layer at tp 2: norms 4, casts 5, attention 3, MLP 6 MiB.
  EXPECT_DOUBLE_EQ(AutocastBytesPerLayer(spec, config), 18 * kMiB);
}

TEST(AutocastParallelTest, TensorParallelRanksAgainstThePredictor) {
  const ModelSpec spec = Spec(kSmallLlama);
  // The forward's peak (the loss-parallel cross-entropy), activation roles in MiB.
  for (const auto& [tp, measured] : {std::pair<int64_t, double>{2, 325.99}, {4, 173.76}}) {
    TrainingConfig config = Predicted();
    config.layout.tp = tp;
    config.layout.sequence_parallel = true;
    ASSERT_OK_AND_ASSIGN(const MemoryEstimate estimate, EstimateTraining(spec, config));
    EXPECT_EQ(estimate.Find("loss_backward")->value, 10.0 * 512 * 2 * 32000 / tp);
    EXPECT_LT(Within(ActivationBytes(estimate), measured * kMiB), 0.01) << "tp " << tp;
  }
}

TEST(AutocastParallelTest, MicroBatchesInFlightFollowTorchsSchedules) {
  ParallelLayout l;
  l.pp = 4;
  l.num_microbatches = 8;
  EXPECT_EQ(AutocastMicroBatchesInFlight(l), 4);  // 1F1B rank 0: p - r
  l.stage = 3;
  EXPECT_EQ(AutocastMicroBatchesInFlight(l), 1);
  l.num_microbatches = 2;
  l.stage = 0;
  EXPECT_EQ(AutocastMicroBatchesInFlight(l), 2);  // at most m
  l.schedule = PipelineSchedule::kGpipe;
  l.num_microbatches = 8;
  EXPECT_EQ(AutocastMicroBatchesInFlight(l), 8);
  // Interleaved, p 2, v 2, m 4 (two rounds of 2): warm-up 2 + 2 (p - 1 - r) forwards of one
  // stage, then one more: 5 of 2 stages on rank 0, 3 on rank 1.
  ParallelLayout i;
  i.pp = 2;
  i.vpp = 2;
  i.num_microbatches = 4;
  EXPECT_EQ(AutocastMicroBatchesInFlight(i), 2.5);
  i.stage = 1;
  EXPECT_EQ(AutocastMicroBatchesInFlight(i), 1.5);
  i.num_microbatches = 0;  // default: the number of stages
  EXPECT_EQ(PipelineMicroBatches(i), 4);
}

TEST(AutocastParallelTest, PipelineRanksHoldTheirEnds) {
  const ModelSpec spec = Spec(kSmallLlama);
  TrainingConfig config = Predicted();
  config.layout.pp = 2;
  config.layout.num_microbatches = 4;
  ASSERT_OK_AND_ASSIGN(const MemoryEstimate first, EstimateTraining(spec, config));
  EXPECT_EQ(first.Find("activations_output"), nullptr);
  EXPECT_EQ(first.Find("loss_backward"), nullptr);
  EXPECT_EQ(first.Find("activations_pipeline_outputs"), nullptr);
  EXPECT_TRUE(first.Find("gradients")->at_backward_start);  // accumulated over micro-batches
  config.layout.stage = 1;
  ASSERT_OK_AND_ASSIGN(const MemoryEstimate last, EstimateTraining(spec, config));
  const Term* outputs = last.Find("activations_pipeline_outputs");
  ASSERT_NE(outputs, nullptr);
  EXPECT_EQ(outputs->value, 4.0 * 2 * 512 * 2 * 32000);  // m E s b V
  EXPECT_TRUE(outputs->at_optimizer_step);
  // The ranks' parameters: the embedding on the first, the final norm and lm_head on the last.
  ASSERT_OK_AND_ASSIGN(const ParameterCount count, CountParameters(spec));
  const double layers = 2.0 * static_cast<double>(count.per_dense_layer);
  ParallelLayout rank0 = config.layout;
  rank0.stage = 0;
  EXPECT_EQ(ShardParameters(spec, count, rank0).total(), layers + 32000.0 * 512);
  EXPECT_EQ(ShardParameters(spec, count, config.layout).total(), layers + 512 + 32000.0 * 512);
}

TEST(AutocastParallelTest, PipelineRanksAgainstThePredictor) {
  const ModelSpec spec = Spec(kSmallLlama);
  struct Case {
    PipelineSchedule schedule;
    int64_t vpp, stage;
    double measured_mib, tolerance;
  };
  // 1F1B and GPipe rank 0 at their last forward (2 and 4 micro-batches held), the last rank at
  // its last backward (the merged outputs and the loss backward); interleaved, 2 stages a rank.
  const Case cases[] = {{PipelineSchedule::k1F1B, 1, 0, 154.20, 0.02},
                        {PipelineSchedule::k1F1B, 1, 1, 743.37, 0.01},
                        {PipelineSchedule::kGpipe, 1, 0, 292.36, 0.02},
                        {PipelineSchedule::k1F1B, 2, 0, 194.24, 0.02},
                        {PipelineSchedule::k1F1B, 2, 1, 776.41, 0.01}};
  for (const Case& c : cases) {
    TrainingConfig config = Predicted();
    config.layout.pp = 2;
    config.layout.num_microbatches = 4;
    config.layout.schedule = c.schedule;
    config.layout.vpp = c.vpp;
    config.layout.stage = c.stage;
    ASSERT_OK_AND_ASSIGN(const MemoryEstimate estimate, EstimateTraining(spec, config));
    EXPECT_LT(Within(ActivationBytes(estimate), c.measured_mib * kMiB), c.tolerance)
        << PipelineScheduleName(c.schedule) << " vpp " << c.vpp << " rank " << c.stage << ": "
        << ActivationBytes(estimate) / kMiB << " MiB";
  }
}

TEST(AutocastParallelTest, BadLayoutsNameTheField) {
  const ModelSpec spec = Spec(kSmallLlama);
  TrainingConfig config = Predicted();
  config.layout.pp = 2;
  config.layout.stage = 2;
  EXPECT_NE(std::string(EstimateTraining(spec, config).status().message()).find("stage = 2"),
            std::string::npos);
  config.layout.stage = 0;
  config.layout.vpp = 2;
  config.layout.schedule = PipelineSchedule::kGpipe;
  EXPECT_NE(std::string(EstimateTraining(spec, config).status().message()).find("gpipe"),
            std::string::npos);
  config = Predicted();
  config.layout.sequence_parallel = true;
  EXPECT_NE(std::string(EstimateTraining(spec, config).status().message())
                .find("sequence parallelism with tp = 1"),
            std::string::npos);
  EXPECT_FALSE(ParsePipelineSchedule("zb-v", "job.pp_schedule").ok());
}

TEST(AutocastParallelTest, LoraAgainstThePredictor) {
  const ModelSpec spec = Spec(kSmallLlama);
  TrainingConfig config = Predicted();
  config.lora.rank = 8;  // peft's default targets for a Llama: q_proj, v_proj
  ASSERT_OK_AND_ASSIGN(const MemoryEstimate estimate, EstimateTraining(spec, config));
  // Per layer: norms 2 x 4 s b h, attention E s b (2q + 2k), MLP 3 E s b f, adapters
  // E s b (2 h + 2 r): 4 + 6 + 9 + 2.03 MiB.
  const double per_layer = (4 + 6 + 9) * kMiB + 2.0 * 512 * 2 * (2 * 512 + 2 * 8);
  EXPECT_DOUBLE_EQ(estimate.Find("activations")->value, 4 * per_layer);
  // The backward's start: saved 209.68 + temporaries 250.01 MiB.
  EXPECT_LT(Within(ActivationBytes(estimate, false), 459.68 * kMiB), 0.01);
  for (const std::string& note : estimate.notes) {
    EXPECT_EQ(note.find("no measured basis"), std::string::npos) << note;
  }
}

TEST(AutocastParallelTest, QloraAgainstThePredictor) {
  const ModelSpec spec = Spec(kSmallLlama);
  // The adapters save the inputs they share with the 4-bit base: the first norm's output for q
  // and v (E s b h) and lora_B's inputs; with every matrix adapted also the second norm's output
  // and the product (h + f); measured at the backward's start 455.68 and 472.52 MiB.
  for (const auto& [targets, measured] :
       {std::pair<uint32_t, double>{kLoraQ | kLoraV, 455.68}, {kLoraAll, 472.52}}) {
    TrainingConfig config = Predicted();
    config.lora.rank = 8;
    config.lora.qlora = true;
    config.lora.targets = targets;
    ASSERT_OK_AND_ASSIGN(const MemoryEstimate estimate, EstimateTraining(spec, config));
    EXPECT_LT(Within(ActivationBytes(estimate, false), measured * kMiB), 0.01) << targets;
  }
}

TEST(AutocastParallelTest, GenerateHoldsAutocastsWeightCopies) {
  const ModelSpec spec = Spec(kSmallLlama);
  InferenceConfig config;
  config.weights = DType::kFp32;
  config.autocast = DType::kBf16;
  config.kv_cache = DType::kBf16;
  config.batch = 2;
  config.prompt_tokens = 512;
  config.context = 512 + 8 - 1;
  ASSERT_OK_AND_ASSIGN(const MemoryEstimate estimate, EstimateInference(spec, config));
  const Term* casts = estimate.Find("activations_autocast_weights");
  ASSERT_NE(casts, nullptr);
  EXPECT_EQ(casts->value,
            2.0 * (4 * (2 * 512 * 1024 + 2 * 512 * 512 + 3 * 512 * 1536) + 32000.0 * 512));
  // The prefill's peak: temporaries 63.41 MiB, of which the final norm's output for the prompt
  // and the last position's logits are 2.1 (not a term).
  EXPECT_LT(Within(casts->value, 63.41 * kMiB), 0.035);
  config.autocast.reset();
  config.weights = DType::kBf16;
  ASSERT_OK_AND_ASSIGN(const MemoryEstimate plain, EstimateInference(spec, config));
  EXPECT_EQ(plain.Find("activations_autocast_weights"), nullptr);
}

}  // namespace
}  // namespace fragscope::estimator
