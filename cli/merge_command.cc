// `fragscope merge`: the cross-rank report (cross_rank.h) from the summaries `fragscope
// summarize` wrote.
#include <limits>
#include <optional>

#include "absl/strings/str_format.h"
#include "analysis/ranks/cross_rank_report.h"
#include "analysis/ranks/rank_inputs.h"
#include "analysis/ranks/rank_reduction.h"
#include "cli/output_file.h"
#include "cli/rank_commands.h"

namespace fragscope::cli {
namespace {

const CommandSpec& Command() {
  static const CommandSpec spec{
      .name = "merge",
      .synopsis = R"txt(SUMMARY... [--json OUT] [--html OUT] [--threads N])txt",
      .description =
          R"txt(Builds the cross-rank report from rank summaries written by `fragscope summarize` (a directory
stands for the *.json files in it; a quoted pattern such as 'sums/*.json' is expanded here, past
the shell's argument limit): one line per rank (peak allocated and reserved, utilization, memory
outside PyTorch, OOMs), the outlier ranks said in words with the phase their excess arose in,
pipeline stages and tensor-parallel groups when the logs recorded the sizes, and the worst rank
with its first OOM's explanation. For the worst rank's full explanation, run `fragscope analyze`
on its trace.)txt",
      .flags = {{"--json", "OUT",
                 "write the report as JSON (schema: analysis/CROSS_RANK_SCHEMA.md)"},
                {"--html", "OUT", "write a self-contained HTML page with a chart of the ranks"},
                {"--threads", "N", "summaries read at once (default: one per core)"}},
      .positional = {.min = 1, .error = "no summary given"},
  };
  return spec;
}

}  // namespace

int RunMergeCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  int exit_code = 0;
  const std::optional<ParsedFlags> flags = ParseCommandFlags(args, Command(), out, err, &exit_code);
  if (!flags) return exit_code;
  int threads = 0;
  if (const std::string* t = flags->Get("--threads")) {
    absl::StatusOr<uint64_t> n = ParseCount(*t, "--threads");
    if (!n.ok() || *n == 0 || *n > kMaxThreads) {
      return UsageError(err, "merge",
                        absl::StrFormat("--threads expects 1 to %d, got '%s'", kMaxThreads, *t));
    }
    threads = static_cast<int>(*n);
  }
  absl::StatusOr<std::vector<std::string>> paths = ExpandSummaryInputs(flags->positional);
  if (!paths.ok()) {
    err << "fragscope merge: " << paths.status().message() << "\n";
    return 1;
  }
  std::vector<OutputPath> outputs;
  for (const char* flag : {"--json", "--html"}) {
    if (const std::string* path = flags->Get(flag)) outputs.push_back({flag, *path});
  }
  if (absl::Status s = CheckOutputPaths(*paths, outputs); !s.ok()) {
    return UsageError(err, "merge", s.message());
  }
  absl::StatusOr<std::vector<RankSummary>> summaries = ReadRankSummaries(*paths, threads);
  if (!summaries.ok()) {
    err << "fragscope merge: " << summaries.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<CrossRankReport> report = BuildCrossRankReport(*std::move(summaries));
  if (!report.ok()) {
    err << "fragscope merge: " << report.status().message() << "\n";
    return 1;
  }
  RenderCrossRankText(*report, {}, out);
  if (const std::string* path = flags->Get("--json")) {
    if (absl::Status s =
            WriteOutputFile(*path, [&](std::ostream& o) { WriteCrossRankJson(*report, o); });
        !s.ok()) {
      err << "fragscope merge: " << s.message() << "\n";
      return 1;
    }
    out << "\nJSON report: " << *path << "\n";
  }
  if (const std::string* path = flags->Get("--html")) {
    if (absl::Status s =
            WriteOutputFile(*path, [&](std::ostream& o) { WriteCrossRankHtml(*report, o); });
        !s.ok()) {
      err << "fragscope merge: " << s.message() << "\n";
      return 1;
    }
    out << (flags->Has("--json") ? "" : "\n") << "HTML report: " << *path << "\n";
  }
  return 0;
}

}  // namespace fragscope::cli
