#include "estimator/training_config.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "estimator/model_spec.h"
#include "estimator/status_macros.h"

namespace fragscope::estimator {
namespace {

absl::Status Unknown(absl::string_view field, absl::string_view what, absl::string_view text,
                     absl::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": unknown ", what, " '", text, "' (expected ", expected, ")"));
}

// torch.optim's Adam, AdamW and SGD have all three implementations; 8-bit Adam
// (bitsandbytes) and Adafactor (transformers) are other libraries' with their own kernels.
bool IsTorchOptim(Optimizer optimizer) {
  return optimizer != Optimizer::kAdam8Bit && optimizer != Optimizer::kAdafactor;
}

}  // namespace

absl::Status ValidateTrainingConfig(const TrainingConfig& config) {
  if (config.zero_stage < 0 || config.zero_stage > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("zero = ", config.zero_stage, " must be 0, 1, 2 or 3"));
  }
  if (config.distributed_optimizer && config.zero_stage > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "distributed-optimizer is Megatron's ZeRO-1; it cannot be combined with zero = ",
        config.zero_stage));
  }
  if (config.offload_optimizer && config.zero_stage == 0) {
    return absl::InvalidArgumentError("offload-optimizer needs zero >= 1 (ZeRO-Offload)");
  }
  if (config.offload_params && (config.zero_stage != 3 || !config.offload_optimizer)) {
    return absl::InvalidArgumentError(
        "offload-params needs zero = 3 and offload-optimizer (DeepSpeed has no other combination)");
  }
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(RequireSequenceOrBatch("seq", config.seq_len, 1));
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(RequireSequenceOrBatch("micro-batch", config.micro_batch, 1));
  if (config.lora.qlora && !config.lora.enabled()) {
    return absl::InvalidArgumentError("qlora needs lora-rank > 0");
  }
  if (config.lora.rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("lora-rank = ", config.lora.rank, " must not be negative"));
  }
  if (config.persistent_gradients && config.activation_model != ActivationModel::kTorchAutocast) {
    return absl::InvalidArgumentError(
        "persistent-grads applies to activation-model torch-autocast only (korthikanti always "
        "counts the gradients)");
  }
  if (config.overheads.cuda_context_bytes < 0 || config.overheads.workspace_bytes < 0) {
    return absl::InvalidArgumentError("cuda-context-mib and workspace-mib must not be negative");
  }
  return absl::OkStatus();
}

absl::string_view PrecisionName(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kFp16Mixed:
      return "fp16";
    case Precision::kBf16Mixed:
      return "bf16";
  }
  return "?";
}

absl::string_view GradientRegimeName(GradientRegime regime) {
  switch (regime) {
    case GradientRegime::k16Bit:
      return "16bit";
    case GradientRegime::kFp32:
      return "fp32";
    case GradientRegime::k16BitPlusFp32Copy:
      return "16bit+fp32";
  }
  return "?";
}

absl::string_view OptimizerImplName(OptimizerImpl impl) {
  switch (impl) {
    case OptimizerImpl::kForLoop:
      return "for-loop";
    case OptimizerImpl::kForeach:
      return "foreach";
    case OptimizerImpl::kFused:
      return "fused";
  }
  return "?";
}

absl::string_view OptimizerName(Optimizer optimizer) {
  switch (optimizer) {
    case Optimizer::kAdam:
      return "adam";
    case Optimizer::kAdamW:
      return "adamw";
    case Optimizer::kAdam8Bit:
      return "adam8bit";
    case Optimizer::kSgd:
      return "sgd";
    case Optimizer::kSgdMomentum:
      return "sgd-momentum";
    case Optimizer::kAdafactor:
      return "adafactor";
  }
  return "?";
}

absl::string_view RecomputeName(Recompute recompute) {
  switch (recompute) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
  }
  return "?";
}

absl::string_view ActivationModelName(ActivationModel model) {
  switch (model) {
    case ActivationModel::kKorthikanti:
      return "korthikanti";
    case ActivationModel::kTorchAutocast:
      return "torch-autocast";
  }
  return "?";
}

absl::StatusOr<Precision> ParsePrecision(absl::string_view text, absl::string_view field) {
  const std::string name = absl::AsciiStrToLower(text);
  if (name == "fp32" || name == "float32") return Precision::kFp32;
  if (name == "fp16" || name == "float16" || name == "mixed-fp16") return Precision::kFp16Mixed;
  if (name == "bf16" || name == "bfloat16" || name == "mixed-bf16") return Precision::kBf16Mixed;
  return Unknown(field, "precision", text, "fp32, fp16 or bf16");
}

absl::StatusOr<GradientRegime> ParseGradientRegime(absl::string_view text,
                                                   absl::string_view field) {
  const std::string name = absl::AsciiStrToLower(text);
  if (name == "16bit" || name == "fp16" || name == "bf16") return GradientRegime::k16Bit;
  if (name == "fp32") return GradientRegime::kFp32;
  if (name == "16bit+fp32") return GradientRegime::k16BitPlusFp32Copy;
  return Unknown(field, "gradient regime", text, "16bit, fp32 or 16bit+fp32");
}

absl::StatusOr<Optimizer> ParseOptimizer(absl::string_view text, absl::string_view field) {
  const std::string name = absl::AsciiStrToLower(text);
  if (name == "adam") return Optimizer::kAdam;
  if (name == "adamw") return Optimizer::kAdamW;
  if (name == "adam8bit" || name == "adamw8bit" || name == "adam-8bit" || name == "8bit-adam") {
    return Optimizer::kAdam8Bit;
  }
  if (name == "sgd") return Optimizer::kSgd;
  if (name == "sgd-momentum" || name == "sgdm" || name == "momentum") {
    return Optimizer::kSgdMomentum;
  }
  if (name == "adafactor") return Optimizer::kAdafactor;
  return Unknown(field, "optimizer", text, "adam, adamw, adam8bit, sgd, sgd-momentum or adafactor");
}

absl::StatusOr<OptimizerImpl> ParseOptimizerImpl(absl::string_view text, absl::string_view field) {
  const std::string name = absl::AsciiStrToLower(text);
  if (name == "for-loop") return OptimizerImpl::kForLoop;
  if (name == "foreach") return OptimizerImpl::kForeach;
  if (name == "fused") return OptimizerImpl::kFused;
  return Unknown(field, "optimizer implementation", text, "for-loop, foreach or fused");
}

absl::StatusOr<OptimizerChoice> ParseOptimizerChoice(absl::string_view text,
                                                     absl::string_view field) {
  OptimizerChoice choice;
  absl::string_view name = text;
  for (const OptimizerImpl impl :
       {OptimizerImpl::kForLoop, OptimizerImpl::kForeach, OptimizerImpl::kFused}) {
    const std::string suffix = absl::StrCat("-", OptimizerImplName(impl));
    if (absl::EndsWithIgnoreCase(text, suffix)) {
      name = text.substr(0, text.size() - suffix.size());
      choice.impl = impl;
      break;
    }
  }
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(choice.optimizer, ParseOptimizer(name, field));
  if (choice.impl.has_value() && !IsTorchOptim(choice.optimizer)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": '", text, "': ", OptimizerName(choice.optimizer),
        " is not torch.optim's, so it has no for-loop, foreach or fused implementation to choose"));
  }
  return choice;
}

absl::StatusOr<Recompute> ParseRecompute(absl::string_view text, absl::string_view field) {
  const std::string name = absl::AsciiStrToLower(text);
  if (name == "none" || name == "no") return Recompute::kNone;
  if (name == "selective") return Recompute::kSelective;
  if (name == "full") return Recompute::kFull;
  return Unknown(field, "recompute mode", text, "none, selective or full");
}

absl::StatusOr<ActivationModel> ParseActivationModel(absl::string_view text,
                                                     absl::string_view field) {
  const std::string name = absl::AsciiStrToLower(text);
  if (name == "korthikanti" || name == "megatron") return ActivationModel::kKorthikanti;
  if (name == "torch-autocast" || name == "autocast") return ActivationModel::kTorchAutocast;
  return Unknown(field, "activation model", text, "korthikanti or torch-autocast");
}

double WeightBytes(Precision precision) { return precision == Precision::kFp32 ? 4.0 : 2.0; }

}  // namespace fragscope::estimator
