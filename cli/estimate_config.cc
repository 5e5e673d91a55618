#include "cli/estimate_config.h"

#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#include "allocator/check.h"
#include "cli/estimate_flags.h"
#include "estimator/dtype.h"
#include "estimator/gpu_presets.h"
#include "estimator/inference_memory.h"
#include "estimator/lora.h"
#include "estimator/model_presets.h"
#include "estimator/model_spec.h"
#include "estimator/model_spec_json.h"
#include "estimator/overheads.h"
#include "estimator/parallel_layout.h"
#include "estimator/training_config.h"
#include "estimator/units.h"

namespace fragscope::cli::estimate {

namespace est = ::fragscope::estimator;

namespace {

absl::Status ReadLayout(const Flags& flags, est::ParallelLayout& layout) {
  for (const auto& [name, field] : {std::pair<const char*, int64_t*>{"tp", &layout.tp},
                                    {"pp", &layout.pp},
                                    {"dp", &layout.dp},
                                    {"ep", &layout.ep},
                                    {"vpp", &layout.vpp}}) {
    if (absl::Status s = ReadInt(flags, name, 1, *field); !s.ok()) return s;
  }
  if (absl::Status s = ReadInt(flags, "microbatches", 1, layout.num_microbatches); !s.ok()) {
    return s;
  }
  layout.sequence_parallel = flags.Has("sp");
  if (absl::Status s = ReadInt(flags, "pp-rank", 0, layout.stage); !s.ok()) return s;
  if (absl::Status s = ReadEnum(flags, "pp-schedule", est::ParsePipelineSchedule, layout.schedule);
      !s.ok()) {
    return s;
  }
  if (flags.Value("pp-schedule") == "interleaved-1f1b" && !flags.Has("vpp")) layout.vpp = 2;
  return absl::OkStatus();
}

absl::Status ReadOverheads(const Flags& flags, est::DeviceOverheads& overheads) {
  double context_mib = overheads.cuda_context_bytes / est::kMiB;
  double workspace_mib = overheads.workspace_bytes / est::kMiB;
  if (absl::Status s = ReadDouble(flags, "cuda-context-mib", 0, 1e7, context_mib); !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadDouble(flags, "workspace-mib", 0, 1e7, workspace_mib); !s.ok()) {
    return s;
  }
  if (flags.Has("cuda-context-mib")) overheads.cuda_context_bytes = context_mib * est::kMiB;
  if (flags.Has("workspace-mib")) overheads.workspace_bytes = workspace_mib * est::kMiB;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<est::ModelSpec> BuildModel(const Flags& flags) {
  const std::optional<std::string> preset = flags.Value("preset");
  const std::optional<std::string> json = flags.Value("model-json");
  const std::optional<std::string> params = flags.Value("params");
  if (preset && json) {
    return absl::InvalidArgumentError("give either --preset or --model-json, not both");
  }
  est::ModelSpec spec;
  if (preset) {
    absl::StatusOr<est::ModelSpec> found = est::FindModelPreset(*preset);
    if (!found.ok()) return ForFlag("preset", found.status());
    spec = *std::move(found);
  } else if (json) {
    absl::StatusOr<est::ModelSpec> loaded = est::LoadModelSpecFile(*json);
    if (!loaded.ok()) return ForFlag("model-json", loaded.status());
    spec = *std::move(loaded);
  } else if (!params) {
    return absl::InvalidArgumentError("no model: give --preset, --model-json or --params");
  } else {
    spec.name = absl::StrCat(*params, " parameters");
  }
  if (params) {
    absl::StatusOr<int64_t> count = ParseCount(*params);
    if (!count.ok()) return count.status();
    spec.parameter_count = *count;
  }
  if (absl::Status status = est::ValidateModelSpec(spec); !status.ok()) {
    return ForFlag(preset ? "preset" : (json ? "model-json" : "params"), status);
  }
  return spec;
}

absl::StatusOr<est::TrainingConfig> BuildTraining(const Flags& flags) {
  est::TrainingConfig c;
  FRAGSCOPE_RETURN_IF_ERROR(ReadLayout(flags, c.layout));
  FRAGSCOPE_RETURN_IF_ERROR(ReadEnum(flags, "precision", est::ParsePrecision, c.precision));
  FRAGSCOPE_RETURN_IF_ERROR(ReadEnum(flags, "grads", est::ParseGradientRegime, c.gradients));
  if (const std::optional<std::string> value = flags.Value("optimizer")) {
    absl::StatusOr<est::OptimizerChoice> choice = est::ParseOptimizerChoice(*value, "--optimizer");
    if (!choice.ok()) return choice.status();
    c.optimizer = choice->optimizer;
    if (choice->impl.has_value()) {
      if (flags.Has("optimizer-impl")) {
        return absl::InvalidArgumentError(absl::StrCat("--optimizer-impl: --optimizer ", *value,
                                                       " already names the implementation"));
      }
      c.optimizer_impl = *choice->impl;
    }
  }
  FRAGSCOPE_RETURN_IF_ERROR(
      ReadEnum(flags, "optimizer-impl", est::ParseOptimizerImpl, c.optimizer_impl));
  FRAGSCOPE_RETURN_IF_ERROR(ReadEnum(flags, "recompute", est::ParseRecompute, c.recompute));
  FRAGSCOPE_RETURN_IF_ERROR(
      ReadEnum(flags, "activation-model", est::ParseActivationModel, c.activation_model));
  c.persistent_gradients = flags.Has("persistent-grads");
  int64_t zero = 0;
  if (const std::optional<std::string> value = flags.Value("zero")) {
    if (!absl::SimpleAtoi(*value, &zero) || zero < 0 || zero > 3) {
      return BadValue("zero", *value, "0, 1, 2 or 3");
    }
  }
  c.zero_stage = static_cast<int>(zero);
  c.distributed_optimizer = flags.Has("distributed-optimizer");
  c.offload_optimizer = flags.Has("offload-optimizer");
  c.offload_params = flags.Has("offload-params");
  FRAGSCOPE_RETURN_IF_ERROR(ReadInt(flags, "seq", 1, c.seq_len));
  FRAGSCOPE_RETURN_IF_ERROR(ReadInt(flags, "micro-batch", 1, c.micro_batch));
  c.flash_attention = flags.Has("flash-attention");
  c.dropout = !flags.Has("no-dropout");
  c.include_activations = !flags.Has("no-activations");
  FRAGSCOPE_RETURN_IF_ERROR(ReadInt(flags, "lora-rank", 1, c.lora.rank));
  if (const std::optional<std::string> targets = flags.Value("lora-targets")) {
    absl::StatusOr<uint32_t> parsed = est::ParseLoraTargets(*targets);
    if (!parsed.ok()) return ForFlag("lora-targets", parsed.status());
    c.lora.targets = *parsed;
  }
  c.lora.qlora = flags.Has("qlora");
  c.lora.double_quant = !flags.Has("no-double-quant");
  FRAGSCOPE_RETURN_IF_ERROR(ReadOverheads(flags, c.overheads));
  return c;
}

absl::StatusOr<est::InferenceConfig> BuildInference(const Flags& flags) {
  est::InferenceConfig c;
  FRAGSCOPE_RETURN_IF_ERROR(ReadLayout(flags, c.layout));
  FRAGSCOPE_RETURN_IF_ERROR(ReadEnum(flags, "dtype", est::ParseDType, c.weights));
  FRAGSCOPE_RETURN_IF_ERROR(ReadEnum(flags, "kv-dtype", est::ParseDType, c.kv_cache));
  if (flags.Has("autocast")) {
    est::DType autocast = est::DType::kBf16;
    FRAGSCOPE_RETURN_IF_ERROR(ReadEnum(flags, "autocast", est::ParseDType, autocast));
    c.autocast = autocast;
  }
  FRAGSCOPE_RETURN_IF_ERROR(ReadInt(flags, "batch", 1, c.batch));
  FRAGSCOPE_RETURN_IF_ERROR(ReadInt(flags, "context", 0, c.context));
  FRAGSCOPE_RETURN_IF_ERROR(ReadInt(flags, "prompt", 1, c.prompt_tokens));
  FRAGSCOPE_RETURN_IF_ERROR(ReadDouble(flags, "overhead-factor", 1, 100, c.overhead_factor));
  FRAGSCOPE_RETURN_IF_ERROR(ReadOverheads(flags, c.overheads));
  return c;
}

absl::Status CheckModeFlags(const Flags& flags, bool training) {
  static const char* const kTrainingOnly[] = {"precision",
                                              "grads",
                                              "optimizer",
                                              "optimizer-impl",
                                              "zero",
                                              "distributed-optimizer",
                                              "offload-optimizer",
                                              "offload-params",
                                              "seq",
                                              "micro-batch",
                                              "recompute",
                                              "flash-attention",
                                              "no-dropout",
                                              "no-activations",
                                              "activation-model",
                                              "persistent-grads",
                                              "lora-rank",
                                              "lora-targets",
                                              "qlora",
                                              "no-double-quant",
                                              "microbatches",
                                              "pp-rank",
                                              "pp-schedule",
                                              "vpp",
                                              "sp",
                                              "ep",
                                              "dp"};
  static const char* const kInferenceOnly[] = {"dtype",           "kv-dtype", "autocast",
                                               "batch",           "context",  "prompt",
                                               "overhead-factor", "mfu",      "bw-efficiency"};
  const std::vector<const char*> other_mode =
      training ? std::vector<const char*>(std::begin(kInferenceOnly), std::end(kInferenceOnly))
               : std::vector<const char*>(std::begin(kTrainingOnly), std::end(kTrainingOnly));
  for (const char* name : other_mode) {
    if (flags.Has(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("flag --", name, " applies only to ",
                       training ? "inference (--infer)" : "training (--train)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<est::GpuSpec>> BuildGpu(const Flags& flags) {
  std::optional<est::GpuSpec> gpu;
  if (const std::optional<std::string> name = flags.Value("gpu")) {
    absl::StatusOr<est::GpuSpec> found = est::FindGpuPreset(*name);
    if (!found.ok()) return ForFlag("gpu", found.status());
    gpu = *std::move(found);
  }
  if (flags.Has("gpu-mem-gib")) {
    double gib = 0;
    FRAGSCOPE_RETURN_IF_ERROR(ReadDouble(flags, "gpu-mem-gib", 1e-3, 1e6, gib));
    if (!gpu) {
      gpu = est::GpuSpec{"custom", "custom capacity", 0, 0, 0, "--gpu-mem-gib"};
    }
    gpu->memory_bytes = gib * est::kGiB;
    gpu->source = absl::StrCat("memory: --gpu-mem-gib ", gib, "; ", gpu->source);
  }
  return gpu;
}

}  // namespace fragscope::cli::estimate
