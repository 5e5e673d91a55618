// SVG charts of the HTML report: the memory timeline and the segment maps.
#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/format_size.h"
#include "analysis/report/html_report.h"
#include "analysis/report/text_report.h"

namespace fragscope {
namespace {

constexpr double kWidth = 960;
constexpr double kPlotLeft = 70;
constexpr double kPlotRight = 945;

// A "nice" tick step for an axis spanning `range`.
double TickStep(double range) {
  const double raw = range / 5;
  const double magnitude = std::pow(2.0, std::floor(std::log2(raw)));
  return raw / magnitude > 1.5 ? 2 * magnitude : magnitude;
}

}  // namespace

std::string HtmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string TimelineSvg(const RankReport& rank) {
  const std::vector<TimelinePoint>& points = rank.metrics.timeline;
  const double height = 280, top = 15, bottom = 245;
  std::string svg = absl::StrFormat(
      "<svg class=\"chart\" viewBox=\"0 0 %.0f %.0f\" width=\"%.0f\" height=\"%.0f\" "
      "xmlns=\"http://www.w3.org/2000/svg\" font-family=\"sans-serif\" font-size=\"11\">",
      kWidth, height, kWidth, height);
  if (points.empty()) return svg + "<text x=\"20\" y=\"40\">no events</text></svg>";
  double max_bytes = 1;
  for (const TimelinePoint& p : points) {
    max_bytes = std::max(max_bytes, static_cast<double>(p.reserved_bytes));
  }
  // The cap and a model's peak above the trace's are drawn too: that gap is the verdict.
  if (rank.allowed_bytes.has_value()) {
    max_bytes = std::max(max_bytes, static_cast<double>(*rank.allowed_bytes));
  }
  if (rank.verdict.footprint.has_value() &&
      rank.verdict.footprint->theoretical_peak_bytes < 2 * max_bytes) {
    max_bytes = std::max(max_bytes, rank.verdict.footprint->theoretical_peak_bytes);
  }
  const bool show_capacity = static_cast<double>(rank.capacity_bytes) < 1.6 * max_bytes;
  if (show_capacity) max_bytes = std::max(max_bytes, static_cast<double>(rank.capacity_bytes));
  max_bytes *= 1.05;
  const double first = static_cast<double>(points.front().index);
  const double last = std::max(first + 1, static_cast<double>(points.back().index));
  auto x = [&](double index) {
    return kPlotLeft + (index - first) / (last - first) * (kPlotRight - kPlotLeft);
  };
  auto y = [&](double bytes) { return bottom - bytes / max_bytes * (bottom - top); };
  // Axes and grid.
  const double step = TickStep(max_bytes);
  for (double v = 0; v <= max_bytes; v += step) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>"
                          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#555\">%s</text>",
                          kPlotLeft, kPlotRight, y(v), y(v), kPlotLeft - 4, y(v) + 4,
                          FormatSize(static_cast<uint64_t>(v)));
  }
  absl::StrAppendFormat(&svg,
                        "<text x=\"%.1f\" y=\"%.1f\" fill=\"#555\">event %.0f</text>"
                        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#555\">event "
                        "%.0f</text>",
                        kPlotLeft, bottom + 16, first, kPlotRight, bottom + 16, last);
  // Reserved as a filled area, the others as lines.
  std::string area = absl::StrFormat("M%.1f,%.1f", x(first), y(0));
  for (const TimelinePoint& p : points) {
    absl::StrAppendFormat(&area, " L%.1f,%.1f", x(static_cast<double>(p.index)),
                          y(static_cast<double>(p.reserved_bytes)));
  }
  absl::StrAppendFormat(&area, " L%.1f,%.1f Z", x(static_cast<double>(points.back().index)), y(0));
  absl::StrAppendFormat(&svg, "<path d=\"%s\" fill=\"#dfe6ee\" stroke=\"#8fa3b8\"/>", area);
  struct Series {
    uint64_t TimelinePoint::*field;
    const char* color;
    const char* dash;
  };
  for (const Series& s : {Series{&TimelinePoint::active_bytes, "#f28e2b", "4,2"},
                          Series{&TimelinePoint::allocated_bytes, "#4e79a7", ""},
                          Series{&TimelinePoint::requested_bytes, "#59a14f", "2,2"}}) {
    std::string line;
    for (const TimelinePoint& p : points) {
      absl::StrAppendFormat(&line, "%s%.1f,%.1f ", line.empty() ? "" : "",
                            x(static_cast<double>(p.index)), y(static_cast<double>(p.*(s.field))));
    }
    absl::StrAppendFormat(
        &svg,
        "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" "
        "stroke-dasharray=\"%s\"/>",
        line, s.color, s.dash);
  }
  // The limits the verdict compares with: the memory-fraction cap and the model's theoretical
  // peak (JobVerdict).
  const auto hline = [&](double bytes, const char* color, const std::string& label) {
    if (bytes <= 0 || bytes > max_bytes) return;
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
        "stroke-dasharray=\"6,3\"/><text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"%s\">"
        "%s</text>",
        kPlotLeft, kPlotRight, y(bytes), y(bytes), color, kPlotRight - 6, y(bytes) - 4, color,
        HtmlEscape(label));
  };
  if (rank.allowed_bytes.has_value()) {
    hline(static_cast<double>(*rank.allowed_bytes), "#9467bd",
          "memory cap " + FormatSize(*rank.allowed_bytes));
  }
  if (rank.verdict.footprint.has_value()) {
    const double peak = rank.verdict.footprint->theoretical_peak_bytes;
    hline(peak, "#8c564b", "model's theoretical peak " + FormatSize(static_cast<uint64_t>(peak)));
  }
  if (show_capacity) {
    const double cy = y(static_cast<double>(rank.capacity_bytes));
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#d62728\" "
        "stroke-dasharray=\"6,3\"/><text x=\"%.1f\" y=\"%.1f\" fill=\"#d62728\">"
        "capacity %s</text>",
        kPlotLeft, kPlotRight, cy, cy, kPlotLeft + 6, cy - 4, FormatSize(rank.capacity_bytes));
  }
  for (size_t i = 0; i < rank.ooms.size() && i < 50; ++i) {
    const OomExplanation& o = rank.ooms[i];
    const double ox = x(static_cast<double>(o.event_index));
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#d62728\" "
        "stroke-width=\"2\"><title>OOM #%d at event %d: %s</title></line>",
        ox, ox, top, bottom, i + 1, o.event_index, HtmlEscape(std::string(OomCauseName(o.cause))));
    if (i < 5) {
      absl::StrAppendFormat(&svg,
                            "<text x=\"%.1f\" y=\"%.1f\" fill=\"#d62728\" text-anchor=\"end\">"
                            "OOM #%d</text>",
                            ox - 3, top + 10 + 12.0 * static_cast<double>(i), i + 1);
    }
  }
  // Legend.
  double lx = kPlotLeft;
  for (const auto& [label, color] : {std::pair<const char*, const char*>{"reserved", "#8fa3b8"},
                                     {"allocated", "#4e79a7"},
                                     {"active", "#f28e2b"},
                                     {"requested", "#59a14f"}}) {
    absl::StrAppendFormat(&svg,
                          "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"8\" fill=\"%s\"/>"
                          "<text x=\"%.1f\" y=\"%.1f\">%s</text>",
                          lx, height - 14, color, lx + 16, height - 6, label);
    lx += 100;
  }
  return svg + "</svg>";
}

std::string SegmentMapSvg(const OomExplanation& oom, size_t max_segments) {
  if (!oom.layout.has_value()) return "";
  const LayoutSummary& layout = *oom.layout;
  absl::flat_hash_set<DevicePtr> pinning;
  for (const PinningBlock& p : oom.pinning) pinning.insert(p.address);
  std::vector<const SegmentMap*> rows;
  for (const SegmentMap& m : layout.maps) rows.push_back(&m);
  std::stable_sort(rows.begin(), rows.end(), [](const SegmentMap* a, const SegmentMap* b) {
    if (a->fragmented() != b->fragmented()) return a->fragmented();
    return a->free_bytes > b->free_bytes;
  });
  const size_t shown = std::min(rows.size(), max_segments);
  const double row_h = 16, label_w = 250, top = 4;
  const double height = top + row_h * static_cast<double>(shown) + 36;
  std::string svg = absl::StrFormat(
      "<svg class=\"chart\" viewBox=\"0 0 %.0f %.0f\" width=\"%.0f\" height=\"%.0f\" "
      "xmlns=\"http://www.w3.org/2000/svg\" font-family=\"monospace\" font-size=\"11\">",
      kWidth, height, kWidth, height);
  const double bar_w = kWidth - label_w - 10;
  for (size_t i = 0; i < shown; ++i) {
    const SegmentMap& m = *rows[i];
    const double y = top + row_h * static_cast<double>(i);
    // A private pool's segment is labelled "graph" or "mempool", with its id in the tooltip.
    const char* pool = m.pool_id.is_default()      ? ""
                       : m.pool_id.is_graph_pool() ? " graph"
                                                   : " mempool";
    absl::StrAppendFormat(
        &svg, "<text x=\"0\" y=\"%.1f\">0x%x %9s %s%s%s</text>", y + 11, m.address,
        FormatSize(m.size), m.fragmented() ? "frag" : "", pool,
        m.pool_id.is_default()
            ? ""
            : absl::StrCat("<title>private pool ", FormatPoolId(m.pool_id), "</title>"));
    for (const MapBlock& b : m.blocks) {
      const double bx = label_w + static_cast<double>(b.address - m.address) /
                                      static_cast<double>(m.size) * bar_w;
      const double bw =
          std::max(0.8, static_cast<double>(b.size) / static_cast<double>(m.size) * bar_w);
      const char* fill = b.state == MapBlockState::kFree          ? "#e4e4e4"
                         : b.state == MapBlockState::kPendingFree ? "#f28e2b"
                                                                  : "#4e79a7";
      const bool pin = pinning.contains(b.address) && b.state != MapBlockState::kFree;
      std::string title =
          b.state == MapBlockState::kFree
              ? absl::StrFormat("hole %s at 0x%x", FormatSize(b.size), b.address)
              : absl::StrFormat("%s block at 0x%x (request %s), %s, allocated at event %d (%s)%s",
                                FormatSize(b.size), b.address, FormatSize(b.requested_bytes),
                                b.origin.before_trace ? "before the trace" : b.phase,
                                b.origin.index, FormatDuration(b.origin.time_ns),
                                pin ? " -- pins this segment" : "");
      absl::StrAppendFormat(
          &svg,
          "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" "
          "stroke=\"%s\" stroke-width=\"%s\"><title>%s</title></rect>",
          bx, y + 2, bw, row_h - 4, fill, pin ? "#d62728" : "#ffffff", pin ? "2" : "0.5",
          HtmlEscape(title));
    }
  }
  absl::StrAppendFormat(&svg,
                        "<text x=\"0\" y=\"%.1f\" fill=\"#555\">%d of %d segments shown, "
                        "fragmented first; each bar is one segment drawn to its own length.</text>"
                        "<text x=\"0\" y=\"%.1f\" fill=\"#555\">Blue: allocated, orange: "
                        "pending free, grey: hole, red outline: the largest blocks pinning "
                        "fragmented segments (listed above). Hover for details.</text></svg>",
                        height - 20, shown, rows.size(), height - 6);
  return svg;
}

}  // namespace fragscope
