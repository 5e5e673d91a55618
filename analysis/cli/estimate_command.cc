#include "analysis/cli/estimate_command.h"

#include <cmath>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

#include "estimator/gpu_presets.h"
#include "estimator/inference_memory.h"
#include "estimator/inverse_search.h"
#include "estimator/model_presets.h"
#include "estimator/model_spec.h"
#include "estimator/model_spec_json.h"
#include "estimator/parameter_count.h"
#include "estimator/report.h"
#include "estimator/roofline.h"
#include "estimator/training_config.h"
#include "estimator/training_memory.h"
#include "estimator/units.h"

namespace fragscope::cli {
namespace {

namespace est = ::fragscope::estimator;

constexpr char kUsage[] =
    R"(Usage: fragscope estimate (--preset NAME | --model-json PATH | --params N) [--train] [options]

Per-GPU theoretical memory of training or inference, term by term (bytes, GiB, share), against a
GPU. Every term's formula, values and source: --explain. Units: bytes; GiB = 2^30 bytes.

Model:
  --preset NAME              built-in architecture (--list-presets)
  --model-json PATH          model spec JSON: fragscope's schema or a Hugging Face config.json
  --params N                 parameter count (7e9, 6.7B, 125M); alone: a bare count (no
                             activations or KV cache); with a model: replaces its count
Mode:
  --train                    training (default: inference)
  --infer                    inference
Parallelism:
  --tp N --pp N --dp N       tensor, pipeline, data parallel sizes (default 1)
  --ep N                     expert parallel size, divides --dp (MoE)
  --vpp N                    virtual pipeline stages per rank (interleaved 1F1B)
  --sp                       sequence parallelism
  --microbatches N           micro-batches per step (default: >= pp)
Training:
  --precision fp32|fp16|bf16 default bf16 (16-bit = mixed precision with fp32 master weights)
  --grads 16bit|fp32|16bit+fp32
                             gradient buffers under mixed precision (default fp32)
  --optimizer NAME           adam, adamw (default), adam8bit, sgd, sgd-momentum, adafactor
  --zero 0|1|2|3             DeepSpeed ZeRO stage (default 0)
  --distributed-optimizer    Megatron's distributed optimizer (ZeRO-1 over dp)
  --offload-optimizer        ZeRO-Offload: gradients, master weights, states on the CPU
  --offload-params           ZeRO-3 parameter offload (needs --zero 3 --offload-optimizer)
  --seq N                    sequence length (default 2048)
  --micro-batch N            micro-batch size (default 1)
  --recompute none|selective|full
                             activation recomputation (default none)
  --flash-attention          no s^2 attention tensors are stored
  --no-dropout               no dropout masks (Korthikanti assumes dropout)
  --no-activations           model states only
  --lora-rank R              LoRA with rank R (frozen base)
  --lora-targets LIST        q,k,v,o,gate,up,down or all (default q,v)
  --qlora                    NF4 base weights (QLoRA); --no-double-quant: without double quant
Inference:
  --dtype NAME               weights: fp32, fp16, bf16 (default), fp8, int8, int4
  --kv-dtype NAME            KV cache dtype (default bf16)
  --batch N                  concurrent sequences (default 1)
  --context N                tokens per sequence in the KV cache (default 2048)
  --prompt N                 prefill tokens for the timing (default: --context)
  --overhead-factor X        the EleutherAI 1.2x rule, as its own line (default 1.2; 1 = off)
  --mfu X, --bw-efficiency X roofline efficiencies in (0, 1] (default 1, the ideal bound)
GPU and fixed overheads:
  --gpu NAME                 a100-40gb, a100-80gb, h100-80gb, h200, rtx-4090 (--list-gpus)
  --gpu-mem-gib X            GPU capacity in GiB (overrides the preset's)
  --cuda-context-mib X       CUDA context line (default 526.8 MiB, measured; see README)
  --workspace-mib X          cuBLAS/cuDNN/NCCL workspace line (default 0)
Inverse questions (need --gpu or --gpu-mem-gib):
  --solve max-batch          largest micro-batch (training) or batch (inference) that fits
  --solve max-seq            largest sequence length (training) or context (inference)
  --solve min-gpus           smallest GPU count, scaling one dimension of the layout
  --scale dp|tp|pp           dimension scaled by min-gpus (default dp; tp for inference)
Output:
  --json                     machine-readable report
  --explain                  every formula with its values substituted and its source
  --list-presets, --list-gpus, --help
)";

// Flags that take no value.
constexpr const char* kSwitches[] = {"train",
                                     "infer",
                                     "sp",
                                     "distributed-optimizer",
                                     "offload-optimizer",
                                     "offload-params",
                                     "flash-attention",
                                     "no-dropout",
                                     "no-activations",
                                     "qlora",
                                     "no-double-quant",
                                     "json",
                                     "explain",
                                     "help",
                                     "list-presets",
                                     "list-gpus"};
// Flags that take one value.
constexpr const char* kValued[] = {"preset",
                                   "model-json",
                                   "params",
                                   "tp",
                                   "pp",
                                   "dp",
                                   "ep",
                                   "vpp",
                                   "microbatches",
                                   "precision",
                                   "grads",
                                   "optimizer",
                                   "zero",
                                   "seq",
                                   "micro-batch",
                                   "recompute",
                                   "lora-rank",
                                   "lora-targets",
                                   "dtype",
                                   "kv-dtype",
                                   "batch",
                                   "context",
                                   "prompt",
                                   "overhead-factor",
                                   "mfu",
                                   "bw-efficiency",
                                   "gpu",
                                   "gpu-mem-gib",
                                   "cuda-context-mib",
                                   "workspace-mib",
                                   "solve",
                                   "scale"};

// Parsed command line: switches present and flag -> value.
struct Flags {
  std::map<std::string, bool> switches;
  std::map<std::string, std::string> values;

  bool Has(const std::string& name) const {
    return switches.count(name) > 0 || values.count(name) > 0;
  }
  std::optional<std::string> Value(const std::string& name) const {
    auto it = values.find(name);
    if (it == values.end()) return std::nullopt;
    return it->second;
  }
};

absl::StatusOr<Flags> ParseFlags(const std::vector<std::string>& args) {
  Flags flags;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.size() < 3 || arg.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", arg, "' (flags start with --)"));
    }
    std::string name = arg.substr(2);
    std::optional<std::string> inline_value;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    bool is_switch = false;
    bool is_valued = false;
    for (const char* s : kSwitches) is_switch = is_switch || name == s;
    for (const char* v : kValued) is_valued = is_valued || name == v;
    if (!is_switch && !is_valued) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '--", name, "'"));
    }
    if (flags.Has(name)) {
      return absl::InvalidArgumentError(absl::StrCat("flag --", name, " given twice"));
    }
    if (is_switch) {
      if (inline_value) {
        return absl::InvalidArgumentError(
            absl::StrCat("flag --", name, " takes no value (got '", *inline_value, "')"));
      }
      flags.switches[name] = true;
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
      }
      inline_value = args[++i];
    }
    flags.values[name] = *inline_value;
  }
  return flags;
}

absl::Status BadValue(absl::string_view flag, absl::string_view value, absl::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid value '", value, "' for --", flag, ": expected ", want));
}

// Integer flag: >= minimum, or an error naming the flag and value.
absl::Status ReadInt(const Flags& flags, const std::string& name, int64_t minimum, int64_t& field) {
  const std::optional<std::string> value = flags.Value(name);
  if (!value) return absl::OkStatus();
  int64_t parsed = 0;
  if (!absl::SimpleAtoi(*value, &parsed) || parsed < minimum) {
    return BadValue(name, *value,
                    minimum > 0 ? "a positive integer" : absl::StrCat("an integer >= ", minimum));
  }
  field = parsed;
  return absl::OkStatus();
}

// Finite number flag in [minimum, maximum].
absl::Status ReadDouble(const Flags& flags, const std::string& name, double minimum, double maximum,
                        double& field) {
  const std::optional<std::string> value = flags.Value(name);
  if (!value) return absl::OkStatus();
  double parsed = 0;
  if (!absl::SimpleAtod(*value, &parsed) || !std::isfinite(parsed) || parsed < minimum ||
      parsed > maximum) {
    return BadValue(name, *value, absl::StrFormat("a number in [%g, %g]", minimum, maximum));
  }
  field = parsed;
  return absl::OkStatus();
}

// "7e9", "6.7B", "125M", "70b", "1.5T", "350k" -> count.
absl::StatusOr<int64_t> ParseCount(absl::string_view text) {
  std::string body(text);
  double multiplier = 1;
  if (!body.empty()) {
    switch (absl::ascii_tolower(static_cast<unsigned char>(body.back()))) {
      case 'k':
        multiplier = 1e3;
        break;
      case 'm':
        multiplier = 1e6;
        break;
      case 'b':
      case 'g':
        multiplier = 1e9;
        break;
      case 't':
        multiplier = 1e12;
        break;
      default:
        break;
    }
    if (multiplier != 1) body.pop_back();
  }
  double value = 0;
  if (!absl::SimpleAtod(body, &value) || !std::isfinite(value) || value * multiplier < 1 ||
      value * multiplier > 9e15) {
    return BadValue("params", text, "a positive count such as 7e9, 6.7B or 125M");
  }
  return static_cast<int64_t>(std::llround(value * multiplier));
}

// Wraps a library error so that it names the flag that carried the value.
absl::Status ForFlag(absl::string_view flag, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", status.message()));
}

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

// Runs a parser from estimator/ on a flag's value, naming the flag on error.
template <typename T, typename Parser>
absl::Status ReadEnum(const Flags& flags, const std::string& name, Parser parse, T& field) {
  const std::optional<std::string> value = flags.Value(name);
  if (!value) return absl::OkStatus();
  absl::StatusOr<T> parsed = parse(*value, absl::StrCat("--", name));
  if (!parsed.ok()) return parsed.status();
  field = *parsed;
  return absl::OkStatus();
}

#define FRAGSCOPE_CLI_TRY(expr)              \
  do {                                       \
    ::absl::Status cli_status = (expr);      \
    if (!cli_status.ok()) return cli_status; \
  } while (false)

absl::StatusOr<est::TrainingConfig> BuildTraining(const Flags& flags) {
  est::TrainingConfig c;
  FRAGSCOPE_CLI_TRY(ReadLayout(flags, c.layout));
  FRAGSCOPE_CLI_TRY(ReadEnum(flags, "precision", est::ParsePrecision, c.precision));
  FRAGSCOPE_CLI_TRY(ReadEnum(flags, "grads", est::ParseGradientRegime, c.gradients));
  FRAGSCOPE_CLI_TRY(ReadEnum(flags, "optimizer", est::ParseOptimizer, c.optimizer));
  FRAGSCOPE_CLI_TRY(ReadEnum(flags, "recompute", est::ParseRecompute, c.recompute));
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
  FRAGSCOPE_CLI_TRY(ReadInt(flags, "seq", 1, c.seq_len));
  FRAGSCOPE_CLI_TRY(ReadInt(flags, "micro-batch", 1, c.micro_batch));
  c.flash_attention = flags.Has("flash-attention");
  c.dropout = !flags.Has("no-dropout");
  c.include_activations = !flags.Has("no-activations");
  FRAGSCOPE_CLI_TRY(ReadInt(flags, "lora-rank", 1, c.lora.rank));
  if (const std::optional<std::string> targets = flags.Value("lora-targets")) {
    absl::StatusOr<uint32_t> parsed = est::ParseLoraTargets(*targets);
    if (!parsed.ok()) return ForFlag("lora-targets", parsed.status());
    c.lora.targets = *parsed;
  }
  c.lora.qlora = flags.Has("qlora");
  c.lora.double_quant = !flags.Has("no-double-quant");
  FRAGSCOPE_CLI_TRY(ReadOverheads(flags, c.overheads));
  return c;
}

absl::StatusOr<est::InferenceConfig> BuildInference(const Flags& flags) {
  est::InferenceConfig c;
  FRAGSCOPE_CLI_TRY(ReadLayout(flags, c.layout));
  FRAGSCOPE_CLI_TRY(ReadEnum(flags, "dtype", est::ParseDType, c.weights));
  FRAGSCOPE_CLI_TRY(ReadEnum(flags, "kv-dtype", est::ParseDType, c.kv_cache));
  FRAGSCOPE_CLI_TRY(ReadInt(flags, "batch", 1, c.batch));
  FRAGSCOPE_CLI_TRY(ReadInt(flags, "context", 0, c.context));
  FRAGSCOPE_CLI_TRY(ReadInt(flags, "prompt", 1, c.prompt_tokens));
  FRAGSCOPE_CLI_TRY(ReadDouble(flags, "overhead-factor", 1, 100, c.overhead_factor));
  FRAGSCOPE_CLI_TRY(ReadOverheads(flags, c.overheads));
  return c;
}

// Flags meaningful only in one mode are rejected in the other, so that a typo'd mode does not
// silently ignore them.
absl::Status CheckModeFlags(const Flags& flags, bool training) {
  static const char* const kTrainingOnly[] = {"precision",
                                              "grads",
                                              "optimizer",
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
                                              "lora-rank",
                                              "lora-targets",
                                              "qlora",
                                              "no-double-quant",
                                              "microbatches",
                                              "vpp",
                                              "sp",
                                              "ep",
                                              "dp"};
  static const char* const kInferenceOnly[] = {
      "dtype", "kv-dtype", "batch", "context", "prompt", "overhead-factor", "mfu", "bw-efficiency"};
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
    FRAGSCOPE_CLI_TRY(ReadDouble(flags, "gpu-mem-gib", 1e-3, 1e6, gib));
    if (!gpu) {
      gpu = est::GpuSpec{"custom", "custom capacity", 0, 0, 0, "--gpu-mem-gib"};
    }
    gpu->memory_bytes = gib * est::kGiB;
    gpu->source = absl::StrCat("memory: --gpu-mem-gib ", gib, "; ", gpu->source);
  }
  return gpu;
}

std::string SolveLine(const std::string& what, int64_t answer, const est::GpuSpec& gpu) {
  if (answer == 0) return absl::StrCat("no ", what, " fits ", gpu.name, " (even 1 does not)\n");
  return absl::StrCat("largest ", what, " that fits ", gpu.name, ": ", answer, "\n");
}

void Emit(const est::Report& report, const Flags& flags, const std::string& prefix,
          std::ostream& out) {
  if (flags.Has("json")) {
    std::string json = est::RenderJson(report);
    if (!prefix.empty()) {
      // {"solve": ..., then the report's members.
      json = absl::StrCat("{\n", prefix, json.substr(2));
    }
    out << json;
    return;
  }
  out << prefix << (flags.Has("explain") ? est::RenderExplain(report) : est::RenderText(report));
}

absl::Status Run(const Flags& flags, std::ostream& out) {
  if (flags.Has("list-presets")) {
    for (const est::ModelSpec& spec : est::ModelPresets()) {
      absl::StatusOr<est::ParameterCount> count = est::CountParameters(spec);
      out << absl::StrFormat(
          "%-14s %s parameters\n", spec.name,
          count.ok() ? est::FormatCount(static_cast<double>(count->total)) : "?");
    }
    return absl::OkStatus();
  }
  if (flags.Has("list-gpus")) {
    for (const est::GpuSpec& gpu : est::GpuPresets()) {
      out << absl::StrFormat("%-10s %-34s %8.2f GiB %7.1f TFLOP/s %6.3f TB/s\n", gpu.name,
                             gpu.description, gpu.memory_bytes / est::kGiB, gpu.peak_flops / 1e12,
                             gpu.bandwidth / 1e12);
    }
    return absl::OkStatus();
  }
  if (flags.Has("train") && flags.Has("infer")) {
    return absl::InvalidArgumentError("give either --train or --infer, not both");
  }
  const bool training = flags.Has("train");
  FRAGSCOPE_CLI_TRY(CheckModeFlags(flags, training));
  // Flag values first, so that a bad value is reported even when the model is also missing.
  absl::StatusOr<est::TrainingConfig> training_config =
      training ? BuildTraining(flags) : est::TrainingConfig();
  if (!training_config.ok()) return training_config.status();
  absl::StatusOr<est::InferenceConfig> inference_config =
      training ? est::InferenceConfig() : BuildInference(flags);
  if (!inference_config.ok()) return inference_config.status();
  absl::StatusOr<est::ModelSpec> spec = BuildModel(flags);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<std::optional<est::GpuSpec>> gpu = BuildGpu(flags);
  if (!gpu.ok()) return gpu.status();
  const std::optional<std::string> solve = flags.Value("solve");
  const std::optional<std::string> scale_flag = flags.Value("scale");
  if (solve && !*gpu) return absl::InvalidArgumentError("--solve needs --gpu or --gpu-mem-gib");
  if (solve && *solve != "max-batch" && *solve != "max-seq" && *solve != "min-gpus") {
    return BadValue("solve", *solve, "max-batch, max-seq or min-gpus");
  }
  if (scale_flag && (!solve || *solve != "min-gpus")) {
    return absl::InvalidArgumentError("--scale applies only to --solve min-gpus");
  }
  est::ScaleDimension scale =
      training ? est::ScaleDimension::kDataParallel : est::ScaleDimension::kTensorParallel;
  if (scale_flag) {
    if (*scale_flag == "dp") {
      scale = est::ScaleDimension::kDataParallel;
    } else if (*scale_flag == "tp") {
      scale = est::ScaleDimension::kTensorParallel;
    } else if (*scale_flag == "pp") {
      scale = est::ScaleDimension::kPipelineParallel;
    } else {
      return BadValue("scale", *scale_flag, "dp, tp or pp");
    }
  }

  est::Report report;
  report.has_gpu = gpu->has_value();
  if (report.has_gpu) report.gpu = **gpu;
  const double capacity = report.has_gpu ? report.gpu.memory_bytes : 0;
  std::string prefix;
  const bool json = flags.Has("json");
  auto solve_prefix = [&](const std::string& kind, int64_t answer, const std::string& text) {
    prefix = json ? absl::StrCat("  \"solve\": ", est::JsonQuote(kind), ",\n  \"answer\": ", answer,
                                 ",\n")
                  : text;
  };

  if (training) {
    absl::StatusOr<est::TrainingConfig>& config = training_config;
    if (solve) {
      if (*solve == "min-gpus") {
        absl::StatusOr<est::GpuCountResult> r =
            est::SmallestGpuCount(*spec, *config, capacity, scale);
        if (!r.ok()) return r.status();
        solve_prefix(
            "min-gpus", r->found ? r->layout.gpus() : 0,
            r->found ? absl::StrFormat("smallest GPU count that fits %s: %d (tp %d x "
                                       "pp %d x dp %d)\n\n",
                                       report.gpu.name, r->layout.gpus(), r->layout.tp,
                                       r->layout.pp, r->layout.dp)
                     : absl::StrCat("no layout up to 65536 GPUs fits ", report.gpu.name, "\n\n"));
        if (r->found) config->layout = r->layout;
      } else {
        const bool batch = *solve == "max-batch";
        absl::StatusOr<int64_t> answer = batch ? est::LargestMicroBatch(*spec, *config, capacity)
                                               : est::LargestSequence(*spec, *config, capacity);
        if (!answer.ok()) return answer.status();
        solve_prefix(
            *solve, *answer,
            SolveLine(batch ? "micro-batch" : "sequence length", *answer, report.gpu) + "\n");
        if (*answer > 0) (batch ? config->micro_batch : config->seq_len) = *answer;
      }
    }
    absl::StatusOr<est::MemoryEstimate> estimate = est::EstimateTraining(*spec, *config);
    if (!estimate.ok()) return estimate.status();
    report.estimate = *std::move(estimate);
  } else {
    absl::StatusOr<est::InferenceConfig>& config = inference_config;
    est::RooflineOptions roofline;
    FRAGSCOPE_CLI_TRY(ReadDouble(flags, "mfu", 1e-6, 1, roofline.compute_efficiency));
    FRAGSCOPE_CLI_TRY(ReadDouble(flags, "bw-efficiency", 1e-6, 1, roofline.bandwidth_efficiency));
    if (solve) {
      if (*solve == "min-gpus") {
        absl::StatusOr<est::GpuCountResult> r =
            est::SmallestGpuCountForInference(*spec, *config, capacity, scale);
        if (!r.ok()) return ForFlag("scale", r.status());
        solve_prefix("min-gpus", r->found ? r->layout.tp * r->layout.pp : 0,
                     r->found ? absl::StrFormat("smallest GPU count that fits %s: %d (tp %d x "
                                                "pp %d)\n\n",
                                                report.gpu.name, r->layout.tp * r->layout.pp,
                                                r->layout.tp, r->layout.pp)
                              : absl::StrCat("no layout fits ", report.gpu.name, "\n\n"));
        if (r->found) config->layout = r->layout;
      } else {
        const bool batch = *solve == "max-batch";
        absl::StatusOr<int64_t> answer = batch
                                             ? est::LargestInferenceBatch(*spec, *config, capacity)
                                             : est::LargestContext(*spec, *config, capacity);
        if (!answer.ok()) return answer.status();
        solve_prefix(*solve, *answer,
                     SolveLine(batch ? "batch" : "context", *answer, report.gpu) + "\n");
        if (*answer > 0) (batch ? config->batch : config->context) = *answer;
      }
    }
    absl::StatusOr<est::MemoryEstimate> estimate = est::EstimateInference(*spec, *config);
    if (!estimate.ok()) return estimate.status();
    report.estimate = *std::move(estimate);
    if (report.has_gpu && report.gpu.peak_flops > 0) {
      absl::StatusOr<std::vector<est::Term>> timing =
          est::RooflineTerms(*spec, *config, report.gpu, roofline);
      if (!timing.ok()) return timing.status();
      report.timing = *std::move(timing);
    }
  }
  Emit(report, flags, prefix, out);
  return absl::OkStatus();
}

}  // namespace

int RunEstimateCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  absl::StatusOr<Flags> flags = ParseFlags(args);
  if (flags.ok() && flags->Has("help")) {
    out << kUsage;
    return 0;
  }
  absl::Status status = flags.ok() ? Run(*flags, out) : flags.status();
  if (status.ok()) return 0;
  // The estimator names configuration fields like the flags ("tp = 3 does not divide ...");
  // show them as flags.
  std::string message(status.message());
  for (const char* name : kValued) {
    if (message.rfind(absl::StrCat(name, " = "), 0) == 0) {
      message = absl::StrCat("--", message);
      break;
    }
  }
  err << "fragscope estimate: error: " << message << "\n"
      << "Run 'fragscope estimate --help' for usage.\n";
  return 2;
}

}  // namespace fragscope::cli
