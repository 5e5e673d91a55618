// The terminal rendering of a CrossRankReport: one line per rank, then the outliers in words,
// the pipeline stages, notes, and the worst rank's explanation.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/format_size.h"
#include "analysis/ranks/cross_rank_report.h"

namespace fragscope {
namespace {

std::string Shortened(const std::string& text, size_t width) {
  if (text.size() <= width) return text;
  return "..." + text.substr(text.size() - (width - 3));
}

std::string OomColumn(const RankSummary& r) {
  if (r.oom_count == 0) return "0";
  return r.first_oom.has_value() ? absl::StrFormat("%d (%s)", r.oom_count, r.first_oom->cause)
                                 : absl::StrFormat("%d", r.oom_count);
}

void RenderGroups(const char* title, const std::vector<RankGroup>& groups, std::ostream& out) {
  if (groups.empty()) return;
  out << "\n" << title << ":\n";
  for (const RankGroup& g : groups) {
    out << absl::StrFormat(
        "  %d: ranks %d-%d (%d here), peak reserved median %s, max %s (rank %d)%s\n", g.index,
        g.first_rank, g.last_rank, g.ranks, FormatSize(g.median_peak_reserved_bytes),
        FormatSize(g.max_peak_reserved_bytes), g.max_rank,
        g.oom_ranks == 0 ? ""
                         : absl::StrFormat(", %s ran out of memory", CountOf(g.oom_ranks, "rank")));
  }
}

}  // namespace

void RenderCrossRankText(const CrossRankReport& report, const TextReportOptions& options,
                         std::ostream& out) {
  const auto& ranks = report.ranks;
  out << absl::StrFormat("fragscope analysis of %d ranks", ranks.size());
  if (report.world_size > 0) out << absl::StrFormat(" (world size %d)", report.world_size);
  out << "\n\n";
  std::vector<bool> outlier(ranks.size(), false);
  for (const RankOutlier& o : report.outliers) outlier[o.index] = true;
  const bool stages = report.pp_size > 0;
  // At most 100 columns: the OOMs column is last and unpadded.
  out << absl::StrFormat("  %-6s %s%-16s %10s %11s %11s %6s %10s %s\n", "rank",
                         stages ? "stage " : "", "log", "events", "peak alloc", "peak resvd",
                         "util", "outside", "OOMs");
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankSummary& r = ranks[i];
    const char mark = report.worst == i ? '>' : outlier[i] ? '*' : ' ';
    const std::string stage =
        stages ? absl::StrFormat("%-5d ", r.rank / (report.world_size / report.pp_size)) : "";
    out << absl::StrFormat(
        "%c %-6d %s%-16s %10d %11s %11s %5.1f%% %10s %s\n", mark, r.rank, stage,
        Shortened(r.path, 16), r.events, FormatSize(r.peak_allocated_bytes),
        FormatSize(r.peak_reserved_bytes), 100 * r.utilization,
        r.outside_pytorch_bytes.has_value() ? FormatSize(*r.outside_pytorch_bytes) : "-",
        OomColumn(r));
  }
  out << absl::StrFormat("  median %s%27s %11s %11s %5.1f%% %10s\n", stages ? "      " : "", "",
                         FormatSize(report.median_peak_allocated_bytes),
                         FormatSize(report.median_peak_reserved_bytes),
                         100 * report.median_utilization,
                         report.median_outside_pytorch_bytes.has_value()
                             ? FormatSize(*report.median_outside_pytorch_bytes)
                             : "-");
  out << "\nOutliers (*):";
  if (report.outliers.empty()) {
    out << " none (no rank is more than 3.5 MADs from the median of the ranks it is compared "
           "with)\n";
  } else {
    out << "\n";
    for (size_t i : LeadingOutliers(report, kOutliersShown)) {
      WriteWrapped(out, report.outliers[i].sentence, "  - ");
    }
    if (report.outliers.size() > kOutliersShown) {
      out << absl::StrFormat(
          "  (the %d furthest from their median of %d; all in the JSON report)\n", kOutliersShown,
          report.outliers.size());
    }
  }
  RenderGroups("Pipeline stages", report.stages, out);
  RenderGroups("Tensor-parallel groups", report.tp_groups, out);
  if (!report.notes.empty()) {
    out << "\nNotes:\n";
    for (const std::string& n : report.notes) WriteWrapped(out, n, "  - ");
  }
  if (!report.worst.has_value()) return;
  out << "\nWorst rank (>): " << report.worst_reason << "\n\n";
  if (report.worst_report.has_value()) {
    AnalysisReport worst;
    worst.ranks.push_back(*report.worst_report);
    RenderTextReport(worst, options, out);
    return;
  }
  // merge: only the summary is here.
  const RankSummary& w = ranks[*report.worst];
  if (w.first_oom.has_value()) {
    const OomBrief& o = *w.first_oom;
    out << absl::StrFormat("  first OOM at event %d, in \"%s\": %s request, cause: %s%s%s\n",
                           o.event_index, o.phase, FormatSize(o.requested_bytes), o.cause,
                           o.rule.empty() ? "" : " / ", o.rule);
    WriteWrapped(out, o.headline, "    ");
    for (const std::string& e : o.evidence) WriteWrapped(out, e, "      - ");
  }
  WriteWrapped(out,
               absl::StrFormat("For the full explanation (segment maps, the settings sweep), run "
                               "`fragscope analyze %s` where the trace is.",
                               w.path),
               "  ");
}

}  // namespace fragscope
