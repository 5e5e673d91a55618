// `fragscope estimate` (estimate_command.h): parses the flags (estimate_flags.h), builds the
// estimator's inputs (estimate_config.h), answers --solve by the estimator's inverse search and
// renders the report as text, --explain or --json. Errors go to `err` with exit code 2 (1 when
// the --json file cannot be written).
#include "analysis/cli/estimate_command.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

#include "allocator/check.h"
#include "analysis/cli/estimate_config.h"
#include "analysis/cli/estimate_flags.h"
#include "analysis/cli/json_output.h"
#include "analysis/cli/usage_error.h"
#include "analysis/text_wrap.h"
#include "estimator/gpu_presets.h"
#include "estimator/inference_memory.h"
#include "estimator/inverse_search.h"
#include "estimator/model_presets.h"
#include "estimator/model_spec.h"
#include "estimator/parameter_count.h"
#include "estimator/report.h"
#include "estimator/roofline.h"
#include "estimator/term.h"
#include "estimator/training_config.h"
#include "estimator/training_memory.h"
#include "estimator/units.h"

namespace fragscope::cli {
namespace {

namespace est = ::fragscope::estimator;
using estimate::Flags;

constexpr char kUsage[] =
    R"(Usage: fragscope estimate (--preset NAME | --model-json PATH | --params N) [--train] [options]

Per-GPU theoretical memory of training or inference, term by term (bytes, GiB, share), against a
GPU. Every term's formula, values and source: --explain. Units: bytes; GiB = 2^30 bytes.

Model:
  --preset NAME              built-in architecture (--list-presets)
  --model-json PATH          model spec JSON: fragscope's schema or a Hugging Face config.json
  --params N                 parameter count (7e9, 6.7B, 125M); with a model: replaces its
                             count; alone: a bare count, without the architecture that
                             activations and the KV cache need: they are left out (a note
                             says so) unless a flag asks for them (--seq, --context, ...)
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
  --flash-attention          no s^2 attention tensors are stored (default: they are)
  --no-dropout               no dropout masks (default: dropout, as Korthikanti assumes)
                             (the report's second line states both, with the recompute)
  --no-activations           model states only
  --activation-model NAME    korthikanti (default: Megatron's fused kernels) or torch-autocast
                             (transformers' eager modules under torch.autocast, one GPU, no
                             recompute; measured on an H100 for full fine-tuning, not LoRA or
                             QLoRA: estimator/README.md)
  --persistent-grads         torch-autocast: gradients live at the peak (accumulation)
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
  --json PATH                the report as JSON, written to PATH (after the text report) or,
                             with PATH -, to stdout instead of the text
  --explain                  every formula with its values substituted and its source
  --list-presets, --list-gpus, --help
)";

std::string SolveLine(const std::string& what, int64_t answer, const est::GpuSpec& gpu) {
  if (answer == 0) return absl::StrCat("no ", what, " fits ", gpu.name, " (even 1 does not)\n");
  // The search stops at the largest value a configuration accepts.
  const char* const unbounded = answer == est::kMaxSequenceOrBatch
                                    ? " (the largest accepted value: memory does not limit it)"
                                    : "";
  return absl::StrCat("largest ", what, " that fits ", gpu.name, ": ", answer, unbounded, "\n");
}

// `text` with every line longer than kTextColumns wrapped at spaces. A continuation line starts
// where the text after a leading "label: " starts ("    formula: ...", "note: ..."), or else two
// columns past the line's own indent.
std::string WrapLongLines(absl::string_view text) {
  std::string out;
  for (absl::string_view piece : absl::StrSplit(text, '\n')) {
    const std::string_view line(piece.data(), piece.size());
    if (line.size() <= kTextColumns) {
      out.append(line).push_back('\n');
      continue;
    }
    const size_t indent = std::min(line.find_first_not_of(' '), line.size());
    size_t hang = indent + 2;
    const size_t colon = line.find(": ", indent);
    if (colon != std::string_view::npos && colon < 40 &&
        line.substr(indent, colon - indent).find(' ') == std::string_view::npos) {
      hang = std::min(line.find_first_not_of(' ', colon + 1), line.size());
    }
    if (hang > kTextColumns / 2) hang = 4;
    out += WrapParagraph(line.substr(indent), line.substr(0, indent), std::string(hang, ' '));
  }
  out.pop_back();  // StrSplit's last piece had no newline after it
  return out;
}

// The report as text (or --explain), and as JSON with --json: to a file, after the text, or to
// stdout (json_output.h). A failed write is `output_error` (exit 1), not a usage error.
void Emit(const est::Report& report, const Flags& flags, const std::string& text_prefix,
          const est::OrderedJson& solve_json, std::ostream& out, absl::Status& output_error) {
  const std::optional<std::string> json_path = flags.Value("json");
  JsonOutput json(json_path ? &*json_path : nullptr, out);
  json.text() << WrapLongLines(
      text_prefix + (flags.Has("explain") ? est::RenderExplain(report) : est::RenderText(report)));
  if (!json.requested()) return;
  // {"solve": ..., "answer": ..., then the report's members.
  est::OrderedJson document = solve_json.is_object() ? solve_json : est::OrderedJson::object();
  document.update(est::ReportJson(report));
  output_error = json.Write([&](std::ostream& o) { o << est::DumpJson(document); });
  if (output_error.ok() && !json.to_stdout()) {
    out << "\nJSON report: " << *json_path << "\n";
  }
}

absl::Status Run(const Flags& flags, std::ostream& out, absl::Status& output_error) {
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
  FRAGSCOPE_RETURN_IF_ERROR(estimate::CheckModeFlags(flags, training));
  // Flag values first, so that a bad value is reported even when the model is also missing.
  absl::StatusOr<est::TrainingConfig> training_config =
      training ? estimate::BuildTraining(flags) : est::TrainingConfig();
  if (!training_config.ok()) return training_config.status();
  absl::StatusOr<est::InferenceConfig> inference_config =
      training ? est::InferenceConfig() : estimate::BuildInference(flags);
  if (!inference_config.ok()) return inference_config.status();
  absl::StatusOr<est::ModelSpec> spec = estimate::BuildModel(flags);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<std::optional<est::GpuSpec>> gpu = estimate::BuildGpu(flags);
  if (!gpu.ok()) return gpu.status();
  const std::optional<std::string> solve = flags.Value("solve");
  const std::optional<std::string> scale_flag = flags.Value("scale");
  if (solve && !*gpu) return absl::InvalidArgumentError("--solve needs --gpu or --gpu-mem-gib");
  if (solve && *solve != "max-batch" && *solve != "max-seq" && *solve != "min-gpus") {
    return estimate::BadValue("solve", *solve, "max-batch, max-seq or min-gpus");
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
      return estimate::BadValue("scale", *scale_flag, "dp, tp or pp");
    }
  }

  est::Report report;
  report.has_gpu = gpu->has_value();
  if (report.has_gpu) report.gpu = **gpu;
  const double capacity = report.has_gpu ? report.gpu.memory_bytes : 0;
  std::string text_prefix;
  est::OrderedJson solve_json;  // {"solve", "answer"} with --solve
  // --params alone is a bare count: activations and the KV cache need the architecture. Unless a
  // flag asks for them (the estimator's error then says what is missing), they are left out and
  // a note says so.
  std::string bare_count_note;
  const bool solves_batch_or_length = solve && (*solve == "max-batch" || *solve == "max-seq");
  if (!spec->has_architecture() && !solves_batch_or_length) {
    static const char* const kActivationFlags[] = {
        "seq",        "micro-batch",      "recompute",       "flash-attention",
        "no-dropout", "activation-model", "persistent-grads"};
    static const char* const kKvCacheFlags[] = {"context", "batch", "kv-dtype", "prompt"};
    bool asked = false;
    if (training) {
      for (const char* name : kActivationFlags) asked |= flags.Has(name);
      if (!asked && training_config->include_activations) {
        training_config->include_activations = false;
        bare_count_note =
            "activations not estimated: --params alone is a bare parameter count, without the "
            "architecture they need (give --preset or --model-json)";
      }
    } else {
      for (const char* name : kKvCacheFlags) asked |= flags.Has(name);
      if (!asked) {
        inference_config->context = 0;
        bare_count_note =
            "KV cache not estimated: --params alone is a bare parameter count, without the "
            "architecture it needs (give --preset or --model-json)";
      }
    }
  }
  auto solve_prefix = [&](const std::string& kind, int64_t answer, const std::string& text) {
    solve_json = {{"solve", kind}, {"answer", answer}};
    text_prefix = text;
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
    if (!bare_count_note.empty()) report.estimate.notes.push_back(bare_count_note);
  } else {
    absl::StatusOr<est::InferenceConfig>& config = inference_config;
    est::RooflineOptions roofline;
    FRAGSCOPE_RETURN_IF_ERROR(
        estimate::ReadDouble(flags, "mfu", 1e-6, 1, roofline.compute_efficiency));
    FRAGSCOPE_RETURN_IF_ERROR(
        estimate::ReadDouble(flags, "bw-efficiency", 1e-6, 1, roofline.bandwidth_efficiency));
    if (solve) {
      if (*solve == "min-gpus") {
        absl::StatusOr<est::GpuCountResult> r =
            est::SmallestGpuCountForInference(*spec, *config, capacity, scale);
        if (!r.ok()) return estimate::ForFlag("scale", r.status());
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
    if (!bare_count_note.empty()) report.estimate.notes.push_back(bare_count_note);
    if (report.has_gpu && report.gpu.peak_flops > 0) {
      absl::StatusOr<std::vector<est::Term>> timing =
          est::RooflineTerms(*spec, *config, report.gpu, roofline);
      if (!timing.ok()) return timing.status();
      report.timing = *std::move(timing);
    }
  }
  Emit(report, flags, text_prefix, solve_json, out, output_error);
  return absl::OkStatus();
}

}  // namespace

int RunEstimateCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  absl::StatusOr<Flags> flags = estimate::ParseFlags(args);
  if (flags.ok() && flags->Has("help")) {
    out << kUsage;
    return 0;
  }
  absl::Status output_error;
  absl::Status status = flags.ok() ? Run(*flags, out, output_error) : flags.status();
  if (!output_error.ok()) {
    err << "fragscope estimate: " << output_error.message() << "\n";
    return 1;
  }
  if (status.ok()) return 0;
  return UsageError(err, "estimate", estimate::ShowFieldsAsFlags(status.message()));
}

}  // namespace fragscope::cli
