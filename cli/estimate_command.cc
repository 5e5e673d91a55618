// `fragscope estimate` (estimate_command.h): parses the flags (estimate_flags.h), builds the
// estimator's inputs (estimate_config.h), answers --solve by the estimator's inverse search and
// renders the report as text, --explain or --json. Errors go to `err` with exit code 2 (1 when
// the --json file cannot be written).
#include "cli/estimate_command.h"

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
#include "analysis/report/text_wrap.h"
#include "cli/estimate_config.h"
#include "cli/estimate_flags.h"
#include "cli/json_output.h"
#include "cli/usage_error.h"
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

// What the model spec's reader assumed (an unknown Hugging Face model_type read as a Llama-style
// decoder) goes with the estimate, so the numbers are never shown without it.
void AddSpecAssumptions(const est::ModelSpec& spec, est::MemoryEstimate& estimate) {
  for (const std::string& assumption : spec.assumptions) estimate.notes.push_back(assumption);
}

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
    AddSpecAssumptions(*spec, report.estimate);
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
    AddSpecAssumptions(*spec, report.estimate);
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
  absl::StatusOr<estimate::Flags> flags = estimate::ParseFlags(args);
  if (flags.ok() && flags->Has("help")) {
    out << HelpText(estimate::EstimateCommand());
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
