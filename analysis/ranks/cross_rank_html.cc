// The HTML rendering of a CrossRankReport: a bar chart of every rank's peak reserved and peak
// allocated memory with the median and the outliers marked, the table, the outliers in words,
// the groups, and the worst rank's full HTML report (in an iframe of its own: it is a whole
// document). Self-contained: no script, no network.
#include <algorithm>
#include <sstream>
#include <string>

#include "absl/strings/str_format.h"
#include "allocator/format_size.h"
#include "analysis/ranks/cross_rank_report.h"
#include "analysis/report/html_report.h"

namespace fragscope {
namespace {

constexpr char kStyle[] = R"(
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 24px;
       color: #222; max-width: 1200px; }
h1 { font-size: 22px; } h2 { font-size: 18px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
table { border-collapse: collapse; font-size: 12px; margin: 6px 0; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
th { background: #f4f4f4; } td.l, th.l { text-align: left; }
tr.worst td { background: #fff0f0; font-weight: 600; } tr.out td { background: #fff8e6; }
.note { color: #555; font-size: 13px; }
iframe { width: 100%; height: 1400px; border: 1px solid #ddd; }
)";

std::string Size(uint64_t bytes) { return HtmlEscape(FormatSize(bytes)); }

// One bar per rank (reserved, with allocated inside it), the median as a line; outliers orange,
// the worst rank red. Hover titles give the figures.
std::string RanksSvg(const CrossRankReport& report, const std::vector<bool>& outlier) {
  const auto& ranks = report.ranks;
  uint64_t top = 1;
  for (const RankSummary& r : ranks) top = std::max(top, r.peak_reserved_bytes);
  const double bar = std::clamp(1000.0 / static_cast<double>(ranks.size()), 1.0, 24.0);
  const double width = std::max(600.0, bar * static_cast<double>(ranks.size()) + 70);
  const double height = 260, plot = 220, left = 60;
  const auto y = [&](uint64_t bytes) {
    return 10 + plot * (1.0 - static_cast<double>(bytes) / static_cast<double>(top));
  };
  std::ostringstream svg;
  svg << absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "font-size=\"11\">",
      width, height);
  svg << absl::StrFormat("<text x=\"2\" y=\"14\">%s</text><text x=\"2\" y=\"%.0f\">0</text>",
                         Size(top), 10 + plot);
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankSummary& r = ranks[i];
    const double x = left + bar * static_cast<double>(i);
    const char* color = report.worst == i ? "#d62728" : outlier[i] ? "#f28e2b" : "#4e79a7";
    svg << absl::StrFormat(
        "<g><title>rank %d: peak reserved %s, peak allocated %s%s</title>"
        "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\" opacity=\"0.45\"/>"
        "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"/></g>",
        r.rank, Size(r.peak_reserved_bytes), Size(r.peak_allocated_bytes),
        r.oom_count > 0 ? ", ran out of memory" : "", x, y(r.peak_reserved_bytes),
        std::max(bar - 1, 0.8), 10 + plot - y(r.peak_reserved_bytes), color, x,
        y(r.peak_allocated_bytes), std::max(bar - 1, 0.8), 10 + plot - y(r.peak_allocated_bytes),
        color);
  }
  const double median_y = y(report.median_peak_reserved_bytes);
  svg << absl::StrFormat(
      "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.2f\" y2=\"%.2f\" stroke=\"#222\" "
      "stroke-dasharray=\"4 3\"><title>median peak reserved %s</title></line>",
      left, width - 10, median_y, median_y, Size(report.median_peak_reserved_bytes));
  svg << absl::StrFormat(
      "<text x=\"%.0f\" y=\"%.0f\">ranks %d to %d (light: peak reserved; dark: peak allocated; "
      "dashed: median reserved; orange: outlier; red: worst)</text></svg>",
      left, height - 8, ranks.empty() ? 0 : ranks.front().rank,
      ranks.empty() ? 0 : ranks.back().rank);
  return svg.str();
}

}  // namespace

void WriteCrossRankHtml(const CrossRankReport& report, std::ostream& out) {
  const auto& ranks = report.ranks;
  std::vector<bool> outlier(ranks.size(), false);
  for (const RankOutlier& o : report.outliers) outlier[o.index] = true;
  out << "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>fragscope: " << ranks.size()
      << " ranks</title><style>" << kStyle << "</style></head><body>";
  out << "<h1>fragscope analysis of " << ranks.size() << " ranks"
      << (report.world_size > 0 ? absl::StrFormat(" (world size %d)", report.world_size) : "")
      << "</h1>";
  out << RanksSvg(report, outlier);
  out << "<h2>Outliers</h2>";
  if (report.outliers.empty()) out << "<p>None.</p>";
  out << "<ul>";
  for (size_t i : LeadingOutliers(report, kOutliersShown)) {
    out << "<li>" << HtmlEscape(report.outliers[i].sentence) << "</li>";
  }
  out << "</ul>";
  if (report.outliers.size() > kOutliersShown) {
    out << absl::StrFormat(
        "<p class=\"note\">The %d furthest from their median of %d outliers "
        "(all are marked in the chart and the table).</p>",
        kOutliersShown, report.outliers.size());
  }
  if (report.worst.has_value()) {
    out << "<p><b>Worst rank:</b> " << HtmlEscape(report.worst_reason) << "</p>";
  }
  for (const auto& [title, groups] : {std::pair{"Pipeline stages", &report.stages},
                                      std::pair{"Tensor-parallel groups", &report.tp_groups}}) {
    if (groups->empty()) continue;
    out << "<h2>" << title << "</h2><table><tr><th>#</th><th>ranks</th><th>present</th>"
        << "<th>median peak reserved</th><th>max</th><th>max rank</th><th>OOM ranks</th></tr>";
    for (const RankGroup& g : *groups) {
      out << absl::StrFormat(
          "<tr><td>%d</td><td>%d-%d</td><td>%d</td><td>%s</td><td>%s</td><td>%d</td><td>%d</td>"
          "</tr>",
          g.index, g.first_rank, g.last_rank, g.ranks, Size(g.median_peak_reserved_bytes),
          Size(g.max_peak_reserved_bytes), g.max_rank, g.oom_ranks);
    }
    out << "</table>";
  }
  out << "<h2>Ranks</h2><table><tr><th>rank</th><th class=\"l\">trace</th><th class=\"l\">host"
      << "</th><th>events</th><th>peak allocated</th><th>peak reserved</th><th>utilization</th>"
      << "<th>outside PyTorch</th><th>OOMs</th><th class=\"l\">first OOM cause</th></tr>";
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankSummary& r = ranks[i];
    out << absl::StrFormat(
        "<tr%s><td>%d</td><td class=\"l\">%s</td><td class=\"l\">%s</td><td>%d</td><td>%s</td>"
        "<td>%s</td><td>%.1f%%</td><td>%s</td><td>%d</td><td class=\"l\">%s</td></tr>",
        report.worst == i ? " class=\"worst\""
        : outlier[i]      ? " class=\"out\""
                          : "",
        r.rank, HtmlEscape(r.path), HtmlEscape(r.host), r.events, Size(r.peak_allocated_bytes),
        Size(r.peak_reserved_bytes), 100 * r.utilization,
        r.outside_pytorch_bytes.has_value() ? Size(*r.outside_pytorch_bytes) : "-", r.oom_count,
        r.first_oom.has_value() ? HtmlEscape(r.first_oom->cause) : "");
  }
  out << "</table>";
  for (const std::string& n : report.notes) out << "<p class=\"note\">" << HtmlEscape(n) << "</p>";
  if (report.worst_report.has_value()) {
    AnalysisReport worst;
    worst.ranks.push_back(*report.worst_report);
    std::ostringstream page;
    WriteHtmlReport(worst, page);
    out << "<h2>The worst rank in full</h2><iframe title=\"worst rank\" srcdoc=\""
        << HtmlEscape(page.str()) << "\"></iframe>";
  } else if (report.worst.has_value() && ranks[*report.worst].first_oom.has_value()) {
    const OomBrief& o = *ranks[*report.worst].first_oom;
    out << "<h2>The worst rank's first OOM</h2><p>" << HtmlEscape(o.headline) << "</p><ul>";
    for (const std::string& e : o.evidence) out << "<li>" << HtmlEscape(e) << "</li>";
    out << "</ul>";
  }
  out << "</body></html>\n";
}

}  // namespace fragscope
