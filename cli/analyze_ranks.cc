// `fragscope analyze` over several traces: the cross-rank report (rank_reduction.h).
#include "absl/strings/str_format.h"
#include "analysis/ranks/cross_rank_report.h"
#include "analysis/ranks/rank_reduction.h"
#include "cli/output_file.h"
#include "cli/progress_bar.h"
#include "cli/rank_commands.h"

namespace fragscope::cli {

int RunAnalyzeRanks(const std::vector<std::string>& traces, const ParsedFlags& flags,
                    AnalysisOptions options, std::ostream& out, std::ostream& err) {
  ProgressBar bar(err);
  RankReductionOptions reduction;
  reduction.threads = options.threads;
  if (bar.active()) {
    reduction.progress = [&](size_t done, size_t total) {
      bar.Update(absl::StrFormat("ranks %d/%d", done, total),
                 static_cast<double>(done) / static_cast<double>(total));
    };
    options.progress = [&](const std::string& stage, double f) {
      bar.Update("worst rank: " + stage, f);
    };
  }
  absl::StatusOr<CrossRankReport> report = AnalyzeRanks(traces, options, reduction);
  bar.Clear();
  if (!report.ok()) {
    err << "fragscope analyze: " << report.status().message() << "\n";
    return 1;
  }
  bool any_events = false;
  for (const RankSummary& r : report->ranks) any_events |= r.events > 0;
  if (!any_events) {
    err << "fragscope analyze: none of the " << report->ranks.size()
        << " traces has allocation events: nothing to analyze\n";
    return 1;
  }
  TextReportOptions text;
  text.memory_summary = !flags.Has("--no-summary");
  RenderCrossRankText(*report, text, out);
  if (const std::string* path = flags.Get("--json")) {
    if (absl::Status s =
            WriteOutputFile(*path, [&](std::ostream& o) { WriteCrossRankJson(*report, o); });
        !s.ok()) {
      err << "fragscope analyze: " << s.message() << "\n";
      return 1;
    }
    out << "\nJSON report: " << *path << "\n";
  }
  if (const std::string* path = flags.Get("--html")) {
    if (absl::Status s =
            WriteOutputFile(*path, [&](std::ostream& o) { WriteCrossRankHtml(*report, o); });
        !s.ok()) {
      err << "fragscope analyze: " << s.message() << "\n";
      return 1;
    }
    out << (flags.Has("--json") ? "" : "\n") << "HTML report: " << *path << "\n";
  }
  return 0;
}

}  // namespace fragscope::cli
