// The optimizer step as a term (estimator/optimizer_step.h) and the training peak as the larger
// of the backward start and the optimizer step, against fragscope's predictor (PyTorch's step run
// under fake tensors through the faithful allocator; hooks/README.md "Predicting a job"):
//   PYTHONPATH=hooks/python python3 -m fragscope predict --config llama7b.json --seq 2048
//     --micro-batch 1 --optimizer adamw-foreach|adamw-fused --steps 2 --out X.fslog --json
// with llama7b.json = AutoConfig.for_model("llama") (32 layers), mistral7b.json likewise.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "estimator/model_spec_json.h"
#include "estimator/optimizer_step.h"
#include "estimator/report.h"
#include "estimator/training_memory.h"
#include "estimator/units.h"
#include "tests/estimator/estimate_run.h"
#include "tests/testing/status_matchers.h"

namespace fragscope::estimator {
namespace {

// transformers 5.17's default configs of the two types (the fields the reader needs).
constexpr char kLlama7b[] = R"({"model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 32, "vocab_size": 32000, "tie_word_embeddings": false})";
constexpr char kMistral7b[] = R"({"model_type": "mistral", "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "vocab_size": 32000, "tie_word_embeddings": false})";
constexpr double kLlama7bParams = 6738415616;

ModelSpec Spec(const char* json) {
  absl::StatusOr<ModelSpec> spec = ModelSpecFromJson(json);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : ModelSpec{};
}

// The predictor's job: bf16 autocast, SDPA, no dropout, one GPU, its two 32 MiB cuBLAS
// workspaces, no CUDA context (the allocator does not see it).
TrainingConfig Predicted(OptimizerImpl impl) {
  TrainingConfig config;
  config.activation_model = ActivationModel::kTorchAutocast;
  config.seq_len = 2048;
  config.micro_batch = 1;
  config.flash_attention = true;
  config.dropout = false;
  config.optimizer = Optimizer::kAdamW;
  config.optimizer_impl = impl;
  config.overheads.cuda_context_bytes = 0;
  config.overheads.workspace_bytes = 64.0 * kMiB;
  return config;
}

TEST(OptimizerStepTest, ForeachAdamWPeaksInTheStepAsPredicted) {
  // Predicted: 125.6 GiB in the optimizer step (both steps), the start of the backward lower.
  ASSERT_OK_AND_ASSIGN(MemoryEstimate e,
                       EstimateTraining(Spec(kLlama7b), Predicted(OptimizerImpl::kForeach)));
  ASSERT_TRUE(e.step_peaks.has_value());
  EXPECT_EQ(e.step_peaks->peak, StepMoment::kOptimizerStep);
  EXPECT_NEAR(e.DeviceBytes() / (125.6 * kGiB), 1.0, 0.03);
  EXPECT_DOUBLE_EQ(e.DeviceBytes(), e.step_peaks->optimizer_step);
  // fp32 weights, gradients, m and v, and _foreach_sqrt's copy of v: 20 B per parameter.
  EXPECT_DOUBLE_EQ(e.Find("optimizer_step")->value, 4 * kLlama7bParams);
  EXPECT_DOUBLE_EQ(e.DeviceBytes(), 20 * kLlama7bParams + 64.0 * kMiB);
  // At the peak: gradients and the temporaries; not the activations nor the 16-bit copies.
  EXPECT_TRUE(e.Find("gradients")->at_peak);
  EXPECT_TRUE(e.Find("optimizer_step")->at_peak);
  EXPECT_FALSE(e.Find("activations")->at_peak);
  EXPECT_FALSE(e.Find("weights")->at_peak);

  ASSERT_OK_AND_ASSIGN(MemoryEstimate mistral,
                       EstimateTraining(Spec(kMistral7b), Predicted(OptimizerImpl::kForeach)));
  EXPECT_EQ(mistral.step_peaks->peak, StepMoment::kOptimizerStep);
  EXPECT_NEAR(mistral.DeviceBytes() / (135.0 * kGiB), 1.0, 0.03);
}

TEST(OptimizerStepTest, FusedAdamWAllocatesNothingAndPeaksAtTheBackward) {
  // Predicted: the optimizer step 100.47 GiB; from the second step on, with the states alive,
  // the start of the backward is higher (104.41 GiB, step 1's forward phase).
  ASSERT_OK_AND_ASSIGN(MemoryEstimate e,
                       EstimateTraining(Spec(kLlama7b), Predicted(OptimizerImpl::kFused)));
  EXPECT_DOUBLE_EQ(e.Find("optimizer_step")->value, 0);
  EXPECT_NEAR(e.step_peaks->optimizer_step / (100.47 * kGiB), 1.0, 0.03);
  EXPECT_EQ(e.step_peaks->peak, StepMoment::kBackwardStart);
  EXPECT_NEAR(e.DeviceBytes() / (104.41 * kGiB), 1.0, 0.03);
  EXPECT_FALSE(e.Find("gradients")->at_peak);
  EXPECT_TRUE(e.Find("activations")->at_peak);
}

TEST(OptimizerStepTest, ForLoopAndSgdTemporaries) {
  const ModelSpec spec = Spec(kLlama7b);
  // The embedding (V h) is Llama's largest tensor: its square root and quotient, fp32.
  EXPECT_DOUBLE_EQ(LargestParameterTensor(spec), 32000.0 * 4096);
  TrainingConfig config = Predicted(OptimizerImpl::kForLoop);
  ASSERT_OK_AND_ASSIGN(MemoryEstimate loop, EstimateTraining(spec, config));
  EXPECT_DOUBLE_EQ(loop.Find("optimizer_step")->value, 8.0 * 32000 * 4096);
  // Adam without weight decay allocates what AdamW does.
  config.optimizer = Optimizer::kAdam;
  config.optimizer_impl = OptimizerImpl::kForeach;
  ASSERT_OK_AND_ASSIGN(MemoryEstimate adam, EstimateTraining(spec, config));
  EXPECT_DOUBLE_EQ(adam.Find("optimizer_step")->value, 4 * kLlama7bParams);
  // SGD updates in place; its momentum buffers are states (4 B), none without momentum.
  config.optimizer = Optimizer::kSgdMomentum;
  ASSERT_OK_AND_ASSIGN(MemoryEstimate momentum, EstimateTraining(spec, config));
  EXPECT_DOUBLE_EQ(momentum.Find("optimizer_step")->value, 0);
  EXPECT_DOUBLE_EQ(momentum.Find("optimizer_states")->value, 4 * kLlama7bParams);
  config.optimizer = Optimizer::kSgd;
  ASSERT_OK_AND_ASSIGN(MemoryEstimate sgd, EstimateTraining(spec, config));
  EXPECT_DOUBLE_EQ(sgd.step_peaks->optimizer_step,
                   8 * kLlama7bParams + 64.0 * kMiB);  // weights and gradients only
  // Not torch.optim's: no temporaries term, and a note says so.
  config.optimizer = Optimizer::kAdam8Bit;
  ASSERT_OK_AND_ASSIGN(MemoryEstimate bnb, EstimateTraining(spec, config));
  EXPECT_EQ(bnb.Find("optimizer_step"), nullptr);
  ASSERT_FALSE(bnb.notes.empty());
}

TEST(OptimizerStepTest, ForLoopAdamWAndSgdAsPredicted) {
  // The two-layer Llama of the accuracy test, two steps predicted by
  // scripts/estimator/predict_optimizers.py (the predict command offers foreach and fused only).
  const std::string path =
      std::string(FRAGSCOPE_ESTIMATOR_TEST_DIR) + "/../data/estimator/configs/llama.json";
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  ASSERT_OK_AND_ASSIGN(const ModelSpec spec, ModelSpecFromJson(text.str()));
  TrainingConfig config = Predicted(OptimizerImpl::kForLoop);
  ASSERT_OK_AND_ASSIGN(MemoryEstimate loop, EstimateTraining(spec, config));
  EXPECT_EQ(loop.step_peaks->peak, StepMoment::kOptimizerStep);
  EXPECT_NEAR(loop.DeviceBytes() / 11786356224.0, 1.0, 0.001);
  config.optimizer = Optimizer::kSgdMomentum;
  config.optimizer_impl = OptimizerImpl::kForeach;
  ASSERT_OK_AND_ASSIGN(MemoryEstimate momentum, EstimateTraining(spec, config));
  EXPECT_NEAR(momentum.DeviceBytes() / 8323314176.0, 1.0, 0.01);
  config.optimizer = Optimizer::kSgd;
  ASSERT_OK_AND_ASSIGN(MemoryEstimate sgd, EstimateTraining(spec, config));
  EXPECT_NEAR(sgd.DeviceBytes() / 5655654912.0, 1.0, 0.01);
}

TEST(OptimizerStepTest, OnlyTheTorchAutocastModelHasStepMoments) {
  // The Korthikanti model describes Megatron's step (its fused optimizer, gradients always
  // counted): one peak, no optimizer-step term.
  TrainingConfig config = Predicted(OptimizerImpl::kForeach);
  config.activation_model = ActivationModel::kKorthikanti;
  ASSERT_OK_AND_ASSIGN(MemoryEstimate e, EstimateTraining(Spec(kLlama7b), config));
  EXPECT_FALSE(e.step_peaks.has_value());
  EXPECT_EQ(e.Find("optimizer_step"), nullptr);
}

TEST(OptimizerStepTest, OptimizerNamesCarryTheImplementation) {
  ASSERT_OK_AND_ASSIGN(OptimizerChoice fused, ParseOptimizerChoice("adamw-fused", "optimizer"));
  EXPECT_EQ(fused.optimizer, Optimizer::kAdamW);
  EXPECT_EQ(fused.impl, OptimizerImpl::kFused);
  ASSERT_OK_AND_ASSIGN(OptimizerChoice loop, ParseOptimizerChoice("SGD-for-loop", "optimizer"));
  EXPECT_EQ(loop.optimizer, Optimizer::kSgd);
  EXPECT_EQ(loop.impl, OptimizerImpl::kForLoop);
  ASSERT_OK_AND_ASSIGN(OptimizerChoice bare, ParseOptimizerChoice("adam", "optimizer"));
  EXPECT_FALSE(bare.impl.has_value());
  ASSERT_OK_AND_ASSIGN(OptimizerChoice momentum,
                       ParseOptimizerChoice("sgd-momentum-foreach", "optimizer"));
  EXPECT_EQ(momentum.optimizer, Optimizer::kSgdMomentum);
  absl::StatusOr<OptimizerChoice> bad = ParseOptimizerChoice("adam8bit-fused", "optimizer");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'adam8bit-fused'"), std::string::npos);
  EXPECT_FALSE(ParseOptimizerChoice("adamw-fast", "optimizer").ok());
  EXPECT_FALSE(ParseOptimizerImpl("multi-tensor", "optimizer-impl").ok());
}

TEST(OptimizerStepTest, ReportsSayWhereThePeakIs) {
  ASSERT_OK_AND_ASSIGN(MemoryEstimate e,
                       EstimateTraining(Spec(kLlama7b), Predicted(OptimizerImpl::kForeach)));
  Report report;
  report.estimate = e;
  const std::string text = RenderText(report);
  EXPECT_NE(text.find("peak at the optimizer step (backward start"), std::string::npos) << text;
  EXPECT_NE(text.find("adamw foreach"), std::string::npos) << text;
  const std::string json = RenderJson(report);
  EXPECT_NE(json.find("\"peak\": \"optimizer_step\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"optimizer_step_bytes\""), std::string::npos) << json;
}

TEST(OptimizerStepTest, TheCommandTakesTheImplementationInTheNameOrAFlag) {
  using testing::Contains;
  using testing::RunEstimate;
  const std::vector<std::string> job = {"--preset",
                                        "llama-2-7b",
                                        "--train",
                                        "--seq",
                                        "2048",
                                        "--flash-attention",
                                        "--no-dropout",
                                        "--activation-model",
                                        "torch-autocast",
                                        "--cuda-context-mib",
                                        "0",
                                        "--workspace-mib",
                                        "64"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = job;
    args.insert(args.end(), extra.begin(), extra.end());
    return RunEstimate(args);
  };
  const testing::EstimateResult named = with({"--optimizer", "adamw-fused", "--json", "-"});
  ASSERT_EQ(named.code, 0) << named.err;
  EXPECT_TRUE(Contains(named.out, "\"optimizer_step_bytes\"")) << named.out;
  EXPECT_TRUE(Contains(named.out, "adamw fused")) << named.out;
  const testing::EstimateResult flag = with({"--optimizer-impl", "fused", "--json", "-"});
  ASSERT_EQ(flag.code, 0) << flag.err;
  EXPECT_EQ(flag.out, named.out);
  const testing::EstimateResult foreach = with({});
  EXPECT_TRUE(Contains(foreach.out, "adamw foreach")) << foreach.out;
  EXPECT_TRUE(Contains(foreach.out, "peak at the optimizer step")) << foreach.out;
  const testing::EstimateResult both =
      with({"--optimizer", "adamw-fused", "--optimizer-impl", "foreach"});
  EXPECT_EQ(both.code, 2);
  EXPECT_TRUE(Contains(both.err, "--optimizer-impl")) << both.err;
  const testing::EstimateResult unknown = with({"--optimizer-impl", "multi-tensor"});
  EXPECT_EQ(unknown.code, 2);
  EXPECT_TRUE(Contains(unknown.err, "'multi-tensor'")) << unknown.err;
}

}  // namespace
}  // namespace fragscope::estimator
