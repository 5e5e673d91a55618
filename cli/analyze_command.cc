// `fragscope analyze`: the whole analysis of one or more traces (one per rank).

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "analysis/analyzer.h"
#include "analysis/explain/model_job.h"
#include "analysis/ranks/rank_inputs.h"
#include "analysis/report/html_report.h"
#include "analysis/report/json_report.h"
#include "analysis/report/text_report.h"
#include "cli/analysis_commands.h"
#include "cli/cli_flags.h"
#include "cli/json_output.h"
#include "cli/output_file.h"
#include "cli/predict_beside.h"
#include "cli/progress_bar.h"
#include "cli/rank_commands.h"

namespace fragscope::cli {
namespace {

const CommandSpec& Command() {
  static const CommandSpec spec{
      .name = "analyze",
      .synopsis = "TRACE... [--model SPEC] [--at EVENT] [--json OUT] [--html OUT] [options]",
      .description =
          R"(Replays each trace (an .fslog event log, a PyTorch snapshot pickle from
torch.cuda.memory._dump_snapshot, or an RMM logging_resource_adaptor CSV) through fragscope's
reimplementation of PyTorch's caching allocator on a simulated device, and prints the memory
metrics, an explanation of every out-of-memory error (capacity, fragmentation, allocator policy or
memory held outside PyTorch, with the blocks that pin fragmented segments), and a sweep of
allocator settings with the one that avoids the OOM.
A trace may be `-` (standard input) or a stream (a pipe, a FIFO, <(...)): it is read once,
into an unlinked temporary file, and replayed from there.

Several traces are the ranks of one job (a directory stands for the .fslog, .fslog.zst, .pickle
and .pkl files in it; a quoted pattern such as 'logs/*.fslog' is expanded here): each rank is
reduced to a summary in parallel (--threads), then one table compares them (peak allocated and
reserved, utilization, memory outside PyTorch, OOMs), names the outlier ranks with the phase
their excess arose in, groups ranks by pipeline stage and tensor-parallel group when the logs
record the sizes, and explains the worst rank in full. A snapshot pickle's rank comes from its
file name (rank3_memory_snapshot.pickle, oom_rank3.pickle), else from its position among the
traces. JSON schema of this report: analysis/CROSS_RANK_SCHEMA.md.

A PyTorch snapshot records one trace per device: each device with a trace is analyzed and
reported in full, after a table of the devices (--device N analyzes one).)",
      .flags = Flags(
          {{{"--model", "SPEC",
             "the job's model, for the footprint verdict:\n"
             "PRESET_OR_JSON[:key=value,...]\n"
             "e.g. gpt2-medium:seq=1024,micro_batch=8 or config.json:seq=2048\n"
             "keys: train|infer, tp, pp;\n"
             "  training: seq, micro_batch, precision (fp32|fp16|bf16),\n"
             "  optimizer, zero (0-3), dp, recompute (none|selective|full),\n"
             "  flash (0|1), dropout (0|1), sp (0|1),\n"
             "  activations (korthikanti|torch-autocast);\n"
             "  inference: batch, context, prompt, dtype, kv_dtype\n"
             "a Hugging Face config.json defaults to activations=torch-autocast, flash=1 and its "
             "own dropout; every report lists what was assumed"},
            {"--model-json", "PATH",
             "the model's config.json, with the job (seq, micro-batch, ...) the log records "
             "(fragscope.record_model / observe(model=...)); without either flag the log's "
             "recorded model is used"},
            {"--at", "EVENT",
             "also show the segment layout after trace event EVENT (at a segment event: after the "
             "operation before it; segment events are the allocator's, replayed with the "
             "allocation or free that made them)"},
            {"--json", "OUT",
             "write the report as JSON (schema: analysis/REPORT_SCHEMA.md); OUT -: to stdout, "
             "instead of the text report"},
            {"--html", "OUT", "write a self-contained HTML report"},
            {"--predict", "",
             "also predict the job the log's model record names (fragscope predict: Python 3 "
             "with torch; FRAGSCOPE_PYTHON) under the same device, cap and settings, and set the "
             "log and the prediction side by side: peaks, OOMs, each phase"}},
           kTraceFlags,
           {{"--no-sweep", "", "skip the settings sweep"}},
           kSweepFlags,
           {{"--no-summary", "", "omit PyTorch's memory_summary() table"}}}),
      .positional = {.min = 1, .error = "no trace given"},
  };
  return spec;
}

}  // namespace

int RunAnalyzeCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  int exit_code = 0;
  const std::optional<ParsedFlags> flags = ParseCommandFlags(args, Command(), out, err, &exit_code);
  if (!flags) return exit_code;
  AnalysisOptions options;
  if (absl::Status s = ApplyAnalysisFlags(*flags, &options); !s.ok()) {
    return UsageError(err, "analyze", s.message());
  }
  if (absl::Status s = CheckOutputsAreNotInputs(*flags, {"--json", "--html"}); !s.ok()) {
    return UsageError(err, "analyze", s.message());
  }
  if (const std::string* at = flags->Get("--at")) {
    absl::StatusOr<uint64_t> n = ParseCount(*at, "--at");
    if (!n.ok()) {
      return UsageError(err, "analyze", n.status().message());
    }
    options.at_index = *n;
  }
  if (const std::string* model = flags->Get("--model")) {
    // Checked before the replay, which may take seconds on a large trace.
    if (absl::StatusOr<estimator::MemoryEstimate> e = EstimateFromModelSpec(*model); !e.ok()) {
      return UsageError(err, "analyze", e.status().message());
    }
    options.model = *model;
  }
  if (const std::string* path = flags->Get("--model-json")) {
    if (options.model.has_value()) {
      return UsageError(err, "analyze", "give the model once: --model or --model-json");
    }
    if (absl::StatusOr<ModelJob> m = ModelJobFromConfigFile(*path, std::nullopt); !m.ok()) {
      return UsageError(err, "analyze", m.status().message());
    }
    options.model_json = *path;
  }
  options.run_sweep = !flags->Has("--no-sweep");
  if (!options.run_sweep) {
    for (const FlagSpec& grid : kSweepFlags) {
      if (grid.name != "--threads" && flags->Has(grid.name)) {
        return UsageError(err, "analyze",
                          absl::StrCat(std::string(grid.name),
                                       " sets the sweep's grid, and "
                                       "--no-sweep skips the sweep"));
      }
    }
  }
  ProgressBar bar(err);
  if (bar.active()) {  // else no progress hook in the replay at all
    options.progress = [&](const std::string& stage, double f) { bar.Update(stage, f); };
  }

  // Directories and patterns stand for the traces in them; several traces are ranks.
  absl::StatusOr<std::vector<std::string>> traces = ExpandTraceInputs(flags->positional);
  if (!traces.ok()) {
    bar.Clear();
    err << "fragscope analyze: " << traces.status().message() << "\n";
    return 1;
  }
  if (traces->size() > 1) {
    bar.Clear();
    if (flags->Has("--predict")) {
      return UsageError(err, "analyze", "--predict takes one trace (the log of one rank)");
    }
    return RunAnalyzeRanks(*traces, *flags, options, out, err);
  }
  absl::StatusOr<AnalysisReport> report = AnalyzeTraces(*traces, options);
  bar.Clear();
  if (!report.ok()) {
    err << "fragscope analyze: " << report.status().message() << "\n";
    return 1;
  }
  if (flags->Has("--predict")) {
    for (RankReport& r : report->ranks) PredictBeside(options, r);
  }
  bool any_events = false;
  for (const RankReport& r : report->ranks) any_events |= r.metrics.events > 0;
  if (!any_events) {
    err << "fragscope analyze: " << flags->positional[0]
        << ": the trace is empty (no allocation events): nothing to analyze\n";
    // Why it is empty, when the reader knows (e.g. its only chunk was torn).
    for (const RankReport& r : report->ranks) {
      for (const std::string& w : r.warnings) {
        if (w != kEmptyTraceWarning) err << "  warning: " << w << "\n";
      }
    }
    return 1;
  }
  // `--json -`: stdout carries the JSON alone, and the text goes nowhere.
  JsonOutput json(flags->Get("--json"), out);
  std::ostream& text_out = json.text();
  TextReportOptions text;
  text.memory_summary = !flags->Has("--no-summary");
  RenderTextReport(*report, text, text_out);
  // --json PATH and --html are written all or none; `--json -` goes to stdout after them.
  const std::string* json_path = flags->Get("--json");
  const std::string* html_path = flags->Get("--html");
  std::vector<OutputSpec> outputs;
  if (json.requested() && !json.to_stdout()) {
    outputs.push_back({*json_path, [&](std::ostream& o) { WriteJsonReport(*report, {}, o); }});
  }
  if (html_path != nullptr) {
    outputs.push_back({*html_path, [&](std::ostream& o) { WriteHtmlReport(*report, o); }});
  }
  if (absl::Status s = WriteOutputFiles(outputs); !s.ok()) {
    err << "fragscope analyze: " << s.message() << "\n";
    return 1;
  }
  if (json.to_stdout()) {
    if (absl::Status s = json.Write([&](std::ostream& o) { WriteJsonReport(*report, {}, o); });
        !s.ok()) {
      err << "fragscope analyze: " << s.message() << "\n";
      return 1;
    }
  }
  if (json.requested()) text_out << "\nJSON report: " << *json_path << "\n";
  if (html_path != nullptr) {
    text_out << (json.requested() ? "" : "\n") << "HTML report: " << *html_path << "\n";
  }
  return 0;
}

}  // namespace fragscope::cli
