// `fragscope sweep`: the same trace under a grid of allocator settings, in parallel.
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/format_size.h"
#include "analysis/analyzer.h"
#include "analysis/report/json_report.h"
#include "analysis/report/text_report.h"
#include "cli/analysis_commands.h"
#include "cli/cli_flags.h"
#include "cli/json_output.h"
#include "cli/output_file.h"
#include "cli/progress_bar.h"

namespace fragscope::cli {
namespace {

const CommandSpec& Command() {
  static const CommandSpec spec{
      .name = "sweep",
      .synopsis = R"txt(LOG [--max-split-size-mb LIST] [--roundup-power2-divisions LIST]
                       [--gc-threshold LIST] [--expandable-segments LIST] [--placement LIST]
                       [--capacity SIZE | --gpu NAME] [--threads N] [--device N] [--conf CONF]
                       [--memory-fraction F | --allowed SIZE] [--json OUT])txt",
      .description =
          R"txt(Replays the trace under every combination of the listed settings (on top of the trace's own) on
a simulated device, one allocator per configuration, in parallel threads, and prints peak
reserved memory, utilization (peak active / peak reserved), whether and where it runs out of
memory, and device mallocs/frees (each a cudaMalloc/cudaFree; frees synchronize). The
recommendation avoids the OOM with the lowest peak reserved memory, ties to fewer mallocs; it
says when the trace's OOM is not reproduced (a cap the trace does not record: give it) and when
the trace ends where the job died (a setting that gets past the OOM may still fail later).
A trace may be `-` (standard input) or a stream (a pipe, a FIFO, <(...)): it is read once,
into an unlinked temporary file, and replayed from there.)txt",
      .flags =
          Flags({kSweepFlags,
                 kTraceFlags,
                 {{"--json", "OUT",
                   "write the sweep as JSON (schema fragscope.sweep: analysis/REPORT_SCHEMA.md); "
                   "OUT -: to stdout, instead of the table"}}}),
      .positional = {.min = 1, .max = 1, .error = "expected exactly one trace"},
  };
  return spec;
}

}  // namespace

int RunSweepCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  int exit_code = 0;
  const std::optional<ParsedFlags> flags = ParseCommandFlags(args, Command(), out, err, &exit_code);
  if (!flags) return exit_code;
  AnalysisOptions options;
  if (absl::Status s = ApplyAnalysisFlags(*flags, &options); !s.ok()) {
    return UsageError(err, "sweep", s.message());
  }
  if (absl::Status s = CheckOutputsAreNotInputs(*flags, {"--json"}); !s.ok()) {
    return UsageError(err, "sweep", s.message());
  }
  absl::StatusOr<TraceOpener> opener = TraceOpener::Create(flags->positional[0], {options.device});
  if (!opener.ok()) {
    err << "fragscope sweep: " << opener.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<std::unique_ptr<TraceSource>> source = opener->Open();
  if (!source.ok()) {
    err << "fragscope sweep: " << source.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<ReplayConfig> config = MakeReplayConfig((*source)->info(), options);
  if (!config.ok()) {
    err << "fragscope sweep: " << config.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<std::vector<SweepConfig>> configs =
      BuildSweepConfigs(config->options, options.sweep, options.conf.has_value());
  if (!configs.ok()) {
    return UsageError(err, "sweep", configs.status().message());
  }
  std::string capacity_source;
  ResolveCapacity((*source)->info(), options, &capacity_source);
  const int threads = options.threads > 0
                          ? options.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  ProgressBar bar(err);
  const auto start = std::chrono::steady_clock::now();
  RankReport rank;
  rank.info = (*source)->info();
  rank.info.initial_segments.clear();
  rank.capacity_bytes = config->capacity_bytes;
  rank.allowed_bytes = ReplayCapBytes(*config);
  rank.capacity_source = capacity_source;
  rank.sweep = RunSweep(
      *opener, *configs,
      {config->capacity_bytes, config->allowed_bytes, TraceOwnOptions(rank.info),
       TraceEmptyCacheCalls(*opener, (*source)->info(), options),
       RecordedJobCapReplaced(rank.info, options, config->capacity_bytes), CapFromFlags(options)},
      threads, [&](size_t done, size_t total) {
        bar.Update("sweep", static_cast<double>(done) / static_cast<double>(total));
      });
  rank.sweep_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  bar.Clear();
  bool trace_failed = false;
  const SweepResult* baseline = nullptr;
  for (const SweepResult& r : rank.sweep) {
    if (r.config.is_trace_config) {
      trace_failed = r.ooms > 0 || r.trace_ooms > 0;
      baseline = &r;
    }
    // The trace's own settings failing means the trace cannot be replayed; another row's error
    // (a setting fragscope does not model for this trace) is that row's, shown in the table.
    if (!r.error.empty() && r.config.is_trace_config) {
      err << "fragscope sweep: " << r.config.label << ": " << r.error << "\n";
      return 1;
    }
  }
  // Every row read the same trace: the first says what the reader found.
  for (const std::string& w : rank.sweep.front().source_warnings) {
    err << "fragscope sweep: warning: " << w << "\n";
  }
  if (rank.sweep.front().events == 0) {
    err << "fragscope sweep: " << flags->positional[0]
        << ": the trace is empty (no allocation events): nothing to sweep\n";
    return 1;
  }
  // The whole-job verdict (JobVerdict) needs the OOMs explained and the log's recorded model: one
  // more replay of the job's own settings, without a sweep.
  AnalysisOptions own = options;
  own.run_sweep = false;
  own.progress = nullptr;
  absl::StatusOr<RankReport> explained = AnalyzeTrace(*opener, own);
  if (!explained.ok()) {
    err << "fragscope sweep: " << explained.status().message() << "\n";
    return 1;
  }
  rank.verdict = DecideVerdict(explained->ooms, rank.sweep, explained->verdict.footprint,
                               explained->verdict.demand);
  AttachRecommendation(rank.sweep, trace_failed, rank.verdict);
  if (rank.verdict.capacity_bound) WithholdRecommendation(rank);
  // `--json -`: stdout carries the JSON alone, and the table goes nowhere.
  JsonOutput json(flags->Get("--json"), out);
  std::ostream& text_out = json.text();
  WriteWrapped(
      text_out,
      absl::StrFormat("fragscope sweep of %s: %s on a simulated %s device (%s%s), %s, %.2f s",
                      flags->positional[0], CountOf(rank.sweep.size(), "configuration"),
                      FormatSize(rank.capacity_bytes), capacity_source,
                      rank.allowed_bytes.has_value()
                          ? absl::StrCat("; memory fraction cap ", FormatSize(*rank.allowed_bytes))
                          : "",
                      CountOf(static_cast<uint64_t>(threads), "thread"), rank.sweep_seconds),
      "");
  text_out << "\n";
  RenderSweepTable(rank.sweep, rank.verdict.recommended, rank.verdict.recommendation, text_out);
  if (rank.verdict.capacity_bound) RenderVerdictText(rank, text_out);
  if (baseline != nullptr && baseline->ooms == 0 && baseline->trace_ooms > 0) {
    WriteWrapped(
        text_out,
        absl::StrCat(
            "Note: the trace records ", CountOf(static_cast<uint64_t>(baseline->trace_ooms), "OOM"),
            " that the baseline row's replay does not reproduce.",
            baseline->unrecorded_cap_ooms > 0
                ? " The job's OOM records show the device had room for the request: it ran "
                  "under a memory cap the trace does not record "
                  "(torch.cuda.set_per_process_memory_fraction); give the job's own with "
                  "--memory-fraction F or --allowed SIZE."
                : "",
            " `fragscope analyze` explains each OOM."),
        "  ");
  }
  if (json.requested()) {
    if (absl::Status s = json.Write([&](std::ostream& o) { WriteJsonSweepReport(rank, {}, o); });
        !s.ok()) {
      err << "fragscope sweep: " << s.message() << "\n";
      return 1;
    }
  }
  return 0;
}

}  // namespace fragscope::cli
