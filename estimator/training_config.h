// TrainingConfig: everything about a training job that changes its per-GPU memory, other than
// the model. Parsed from CLI flags by cli/estimate_command.cc; the Parse* helpers name
// the field in their errors.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "estimator/lora.h"
#include "estimator/overheads.h"
#include "estimator/parallel_layout.h"

namespace fragscope::estimator {

// fp32: weights, gradients and states fp32, no master copy. fp16/bf16: mixed precision with
// 16-bit weights and an fp32 master copy (Micikevicius et al., arXiv:1710.03740).
enum class Precision : uint8_t { kFp32, kFp16Mixed, kBf16Mixed };

// Gradient buffers under mixed precision (reference 7):
//   k16Bit             16-bit gradients only (ZeRO paper: 2 + 2 + K=12 = 16 B/param)
//   kFp32              fp32 main gradients accumulated directly (Megatron bf16 default,
//                      HF anatomy: 18 B/param)
//   k16BitPlusFp32Copy 16-bit gradients plus an fp32 copy made by the optimizer (Megatron fp16,
//                      DeepSpeed's estimator: 20 B/param; the copy is optimizer state, so
//                      ZeRO-1 already shards it)
// Ignored for kFp32 precision (gradients are fp32).
enum class GradientRegime : uint8_t { k16Bit, kFp32, k16BitPlusFp32Copy };

enum class Optimizer : uint8_t { kAdam, kAdamW, kAdam8Bit, kSgd, kSgdMomentum, kAdafactor };

// How torch.optim runs the update (Adam, AdamW, SGD): one parameter at a time (foreach=False),
// on per-device-and-dtype lists of tensors with the _foreach_ kernels (PyTorch's default for
// CUDA parameters), or in one fused kernel (fused=True). It decides the step's temporaries
// (optimizer_step.h).
enum class OptimizerImpl : uint8_t { kForLoop, kForeach, kFused };

// An optimizer name with the implementation it may carry: "adamw-fused", "adam-foreach",
// "sgd-for-loop"; `impl` is empty for a bare name.
struct OptimizerChoice {
  Optimizer optimizer = Optimizer::kAdamW;
  std::optional<OptimizerImpl> impl;
};

// Korthikanti et al. (arXiv:2205.05198): none stores everything; selective recomputes the
// attention core (drops the a s^2 terms); full keeps only each layer's input.
enum class Recompute : uint8_t { kNone, kSelective, kFull };

// Which code the activation formulas describe.
//   kKorthikanti   Megatron-style fused kernels, 16-bit residual stream (activation_memory.h)
//   kTorchAutocast transformers' eager modules under torch.autocast with fp32 parameters, one
//                  GPU: fp32 residual stream and norms, per-op activation casts, the loss's fp32
//                  logits; measured tensor by tensor on an H100 (autocast_activations.h)
enum class ActivationModel : uint8_t { kKorthikanti, kTorchAutocast };

struct TrainingConfig {
  Precision precision = Precision::kBf16Mixed;
  GradientRegime gradients = GradientRegime::kFp32;
  Optimizer optimizer = Optimizer::kAdamW;
  OptimizerImpl optimizer_impl = OptimizerImpl::kForeach;
  int zero_stage = 0;                  // DeepSpeed ZeRO 0-3
  bool distributed_optimizer = false;  // Megatron: shards master + states over dp (= ZeRO-1)
  bool offload_optimizer = false;      // ZeRO-Offload: master, states, gradients on the CPU
  bool offload_params = false;         // ZeRO-Infinity/ZeRO-3: weight shards on the CPU
  ParallelLayout layout;
  int64_t seq_len = 2048;
  int64_t micro_batch = 1;
  Recompute recompute = Recompute::kNone;
  bool flash_attention = false;     // no s^2 tensors are stored (like selective)
  bool dropout = true;              // Korthikanti assumes attention and hidden dropout
  bool include_activations = true;  // false: model states only, as DeepSpeed's estimator
  ActivationModel activation_model = ActivationModel::kKorthikanti;
  // kTorchAutocast only: gradients are alive at the activation peak (gradient accumulation, or
  // zero_grad(set_to_none=False)). By default they are freed before the forward and allocated
  // while the backward frees activations, so they are not part of the peak.
  bool persistent_gradients = false;
  LoraConfig lora;
  DeviceOverheads overheads;
};

// Checks ranges and combinations (ZeRO stage, offload needs ZeRO >= 1, offload_params needs
// ZeRO-3, distributed optimizer excludes ZeRO, QLoRA needs LoRA, positive seq_len/micro_batch).
absl::Status ValidateTrainingConfig(const TrainingConfig& config);

absl::string_view PrecisionName(Precision precision);
absl::string_view GradientRegimeName(GradientRegime regime);
absl::string_view OptimizerName(Optimizer optimizer);
absl::string_view OptimizerImplName(OptimizerImpl impl);
absl::string_view RecomputeName(Recompute recompute);
absl::string_view ActivationModelName(ActivationModel model);

absl::StatusOr<Precision> ParsePrecision(absl::string_view text, absl::string_view field);
absl::StatusOr<GradientRegime> ParseGradientRegime(absl::string_view text, absl::string_view field);
absl::StatusOr<Optimizer> ParseOptimizer(absl::string_view text, absl::string_view field);
absl::StatusOr<OptimizerImpl> ParseOptimizerImpl(absl::string_view text, absl::string_view field);
// An optimizer name, optionally suffixed "-for-loop", "-foreach" or "-fused" (the spellings of
// fragscope's predictor and model records); the suffix is refused where torch.optim has no such
// implementation (adam8bit, adafactor, SGD fused).
absl::StatusOr<OptimizerChoice> ParseOptimizerChoice(absl::string_view text,
                                                     absl::string_view field);
absl::StatusOr<Recompute> ParseRecompute(absl::string_view text, absl::string_view field);
absl::StatusOr<ActivationModel> ParseActivationModel(absl::string_view text,
                                                     absl::string_view field);

// Bytes of one weight / activation element at this precision: 4 for fp32, else 2.
double WeightBytes(Precision precision);

}  // namespace fragscope::estimator
