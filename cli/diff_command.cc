// `fragscope diff A B`: two traces of one job side by side (report_comparison.h).
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "analysis/analyzer.h"
#include "analysis/report/comparison_render.h"
#include "analysis/report/html_report.h"
#include "cli/analysis_commands.h"
#include "cli/cli_flags.h"
#include "cli/json_output.h"
#include "cli/output_file.h"
#include "estimator/json_document.h"

namespace fragscope::cli {
namespace {

const CommandSpec& Command() {
  static const CommandSpec spec{
      .name = "diff",
      .synopsis = "A B [--json OUT] [--html OUT] [trace options]",
      .description =
          R"(Sets two traces of one job side by side: before and after a change, two runs, two ranks,
a prediction (fragscope predict) against the real run. Each is replayed as `analyze` replays it
(no sweep), on the same device and under the same options, and the report gives the peaks of
allocated, reserved and demand memory (every request as if granted), the allocations and OOMs,
and each marker phase ("step 0 / forward", ...) of either trace, aligned by the markers' text in
order, with B's difference from A. Two runs of the same job differ by nothing.
A and B are .fslog logs, PyTorch snapshot pickles or RMM CSVs (one device each: --device N
picks it in a snapshot of several). JSON schema: the "comparison" of analysis/REPORT_SCHEMA.md.)",
      .flags = Flags({{{"--json", "OUT",
                        "write the comparison as JSON; OUT -: to stdout, instead of the text"},
                       {"--html", "OUT", "write it as a self-contained HTML page"}},
                      kTraceFlags}),
      .positional = {.min = 2, .max = 2, .error = "expected two traces, A and B"},
  };
  return spec;
}

absl::StatusOr<RankReport> AnalyzeOne(const std::string& path, const AnalysisOptions& options) {
  absl::StatusOr<AnalysisReport> report = AnalyzeTraces({path}, options);
  if (!report.ok()) return report.status();
  if (report->ranks.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " holds the traces of ", report->ranks.size(), " devices: give --device N"));
  }
  return std::move(report->ranks.front());
}

void WriteJson(const ReportComparison& c, std::ostream& out) {
  estimator::OrderedJson j;
  j["schema"] = "fragscope.diff";
  j["comparison"] = ComparisonJson(c);
  out << estimator::DumpJson(j) << "\n";
}

}  // namespace

int RunDiffCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  int exit_code = 0;
  const std::optional<ParsedFlags> flags = ParseCommandFlags(args, Command(), out, err, &exit_code);
  if (!flags) return exit_code;
  AnalysisOptions options;
  if (absl::Status s = ApplyAnalysisFlags(*flags, &options); !s.ok()) {
    return UsageError(err, "diff", s.message());
  }
  if (absl::Status s = CheckOutputsAreNotInputs(*flags, {"--json", "--html"}); !s.ok()) {
    return UsageError(err, "diff", s.message());
  }
  options.run_sweep = false;
  const std::string& a_path = flags->positional[0];
  const std::string& b_path = flags->positional[1];
  absl::StatusOr<RankReport> a = AnalyzeOne(a_path, options);
  if (!a.ok()) {
    err << "fragscope diff: " << a.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<RankReport> b = AnalyzeOne(b_path, options);
  if (!b.ok()) {
    err << "fragscope diff: " << b.status().message() << "\n";
    return 1;
  }
  const auto name = [](const std::string& path) {
    return std::filesystem::path(path).filename().string();
  };
  std::string a_name = name(a_path);
  std::string b_name = name(b_path);
  if (a_name == b_name) {
    a_name = "A";
    b_name = "B";
  }
  ReportComparison c = CompareReports(*a, a_name, *b, b_name);
  c.title = absl::StrCat("B against A (A ", a_path, ", B ", b_path, ")");
  JsonOutput json(flags->Get("--json"), out);
  std::ostream& text_out = json.text();
  RenderComparisonText(c, text_out);
  for (const auto& [which, r] : {std::pair{"A", &*a}, std::pair{"B", &*b}}) {
    for (const std::string& w : r->warnings)
      text_out << "  warning (" << which << "): " << w << "\n";
  }
  std::vector<OutputSpec> outputs;
  if (json.requested() && !json.to_stdout()) {
    outputs.push_back({*flags->Get("--json"), [&](std::ostream& o) { WriteJson(c, o); }});
  }
  if (const std::string* html = flags->Get("--html")) {
    outputs.push_back({*html, [&](std::ostream& o) { WriteComparisonHtml(c, o); }});
  }
  if (absl::Status s = WriteOutputFiles(outputs); !s.ok()) {
    err << "fragscope diff: " << s.message() << "\n";
    return 1;
  }
  if (json.to_stdout()) {
    if (absl::Status s = json.Write([&](std::ostream& o) { WriteJson(c, o); }); !s.ok()) {
      err << "fragscope diff: " << s.message() << "\n";
      return 1;
    }
  }
  return 0;
}

}  // namespace fragscope::cli
