// `fragscope analyze`: the whole analysis of one or more traces (one per rank).

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "analysis/analyzer.h"
#include "analysis/cli/analysis_commands.h"
#include "analysis/cli/cli_flags.h"
#include "analysis/cli/output_file.h"
#include "analysis/cli/progress_bar.h"
#include "analysis/cli/rank_commands.h"
#include "analysis/html_report.h"
#include "analysis/json_report.h"
#include "analysis/model_gap.h"
#include "analysis/rank_inputs.h"
#include "analysis/text_report.h"

namespace fragscope::cli {
namespace {

constexpr char kUsage[] =
    R"usage(usage: fragscope analyze TRACE... [--model SPEC] [--at EVENT] [--json OUT] [--html OUT] [options]

Replays each trace (an .fslog event log, a PyTorch snapshot pickle from
torch.cuda.memory._dump_snapshot, or an RMM logging_resource_adaptor CSV) through fragscope's
reimplementation of PyTorch's caching allocator on a simulated device, and prints the memory
metrics, an explanation of every out-of-memory error (capacity, fragmentation, allocator policy or
memory held outside PyTorch, with the blocks that pin fragmented segments), and a sweep of
allocator settings with the one that avoids the OOM.

Several traces are the ranks of one job (a directory stands for the .fslog, .fslog.zst, .pickle
and .pkl files in it; a quoted pattern such as 'logs/*.fslog' is expanded here): each rank is
reduced to a summary in parallel (--threads), then one table compares them (peak allocated and
reserved, utilization, memory outside PyTorch, OOMs), names the outlier ranks with the phase
their excess arose in, groups ranks by pipeline stage and tensor-parallel group when the logs
record the sizes, and explains the worst rank in full. A snapshot pickle's rank comes from its
file name (rank3_memory_snapshot.pickle, oom_rank3.pickle), else from its position among the
traces. JSON schema of this report: analysis/CROSS_RANK_SCHEMA.md.

  --model SPEC              compare with the theoretical footprint: PRESET_OR_JSON[:key=value,...]
                            e.g. gpt2-medium:seq=1024,micro_batch=8 (keys: analysis/model_gap.h;
                            activations=torch-autocast for an eager PyTorch job)
  --at EVENT                also show the segment layout after trace event EVENT (at a
                            segment event: after the operation before it; segment events are
                            the allocator's, replayed with the allocation or free that made them)
  --json OUT                write the report as JSON (schema: analysis/REPORT_SCHEMA.md)
  --html OUT                write a self-contained HTML report
  --capacity SIZE           device capacity, 2 MiB to 4 TiB (default: the log header; snapshots:
                            inferred at OOMs)
  --memory-fraction F       per-process memory fraction the job ran with (snapshots omit it)
  --allowed SIZE            ... or the cap in bytes (at least 2 MiB)
  --conf CONF               replay under these PYTORCH_CUDA_ALLOC_CONF settings instead of the
                            trace's (a cap the log records is kept unless CONF sets one)
  --device N                the device of a multi-device snapshot
  --no-sweep                skip the settings sweep
  --max-split-size-mb LIST  sweep grid (default 0,64,128,256,512,1024; 0 = unlimited)
  --roundup-power2-divisions LIST   e.g. 4,8 or "[64:8,>:1]"
  --gc-threshold LIST       e.g. 0.6,0.8 (0 = off)
  --expandable-segments LIST   default: the trace's own and True
  --placement LIST          e.g. best_fit,first_fit (first_fit: fragscope only, not recommended)
  --threads N               sweep threads, and ranks summarized at once (default: one per core)
  --no-summary              omit PyTorch's memory_summary() table
)usage";

}  // namespace

int RunAnalyzeCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  absl::StatusOr<ParsedFlags> flags = ParseFlags(args, Flags({kTraceFlags,
                                                              kSweepFlags,
                                                              {{"--model"},
                                                               {"--at"},
                                                               {"--json"},
                                                               {"--html"},
                                                               {"--no-sweep", false},
                                                               {"--no-summary", false}}}));
  if (!flags.ok()) {
    return UsageError(err, "analyze", flags.status().message());
  }
  if (flags->Has("--help")) {
    out << kUsage;
    return 0;
  }
  if (flags->positional.empty()) {
    return UsageError(err, "analyze", "no trace given");
  }
  AnalysisOptions options;
  if (absl::Status s = ApplyAnalysisFlags(*flags, &options); !s.ok()) {
    err << "fragscope analyze: " << s.message() << "\n";
    return 2;
  }
  if (absl::Status s = CheckOutputsAreNotInputs(*flags, {"--json", "--html"}); !s.ok()) {
    err << "fragscope analyze: " << s.message() << "\n";
    return 2;
  }
  if (const std::string* at = flags->Get("--at")) {
    absl::StatusOr<uint64_t> n = ParseCount(*at, "--at");
    if (!n.ok()) {
      err << "fragscope analyze: " << n.status().message() << "\n";
      return 2;
    }
    options.at_index = *n;
  }
  if (const std::string* model = flags->Get("--model")) {
    // Checked before the replay, which may take seconds on a large trace.
    if (absl::StatusOr<estimator::MemoryEstimate> e = EstimateFromModelSpec(*model); !e.ok()) {
      err << "fragscope analyze: " << e.status().message() << "\n";
      return 2;
    }
    options.model = *model;
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
    return RunAnalyzeRanks(*traces, *flags, options, out, err);
  }
  absl::StatusOr<AnalysisReport> report = AnalyzeTraces(*traces, options);
  bar.Clear();
  if (!report.ok()) {
    err << "fragscope analyze: " << report.status().message() << "\n";
    return 1;
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
  TextReportOptions text;
  text.memory_summary = !flags->Has("--no-summary");
  RenderTextReport(*report, text, out);
  if (const std::string* path = flags->Get("--json")) {
    if (absl::Status s =
            WriteOutputFile(*path, [&](std::ostream& o) { WriteJsonReport(*report, {}, o); });
        !s.ok()) {
      err << "fragscope analyze: " << s.message() << "\n";
      return 1;
    }
    out << "\nJSON report: " << *path << "\n";
  }
  if (const std::string* path = flags->Get("--html")) {
    if (absl::Status s =
            WriteOutputFile(*path, [&](std::ostream& o) { WriteHtmlReport(*report, o); });
        !s.ok()) {
      err << "fragscope analyze: " << s.message() << "\n";
      return 1;
    }
    out << (flags->Has("--json") ? "" : "\n") << "HTML report: " << *path << "\n";
  }
  return 0;
}

}  // namespace fragscope::cli
