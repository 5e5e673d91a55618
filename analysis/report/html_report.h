// The one-file HTML rendering of an AnalysisReport: no network access, no external script or
// font; charts are inline SVG drawn here (html_charts.cc), tooltips are SVG <title> elements.
//
// Per rank: headline cards, the memory timeline (reserved, allocated, active, requested, with the
// OOMs and the device capacity marked), each OOM's explanation with the segment map right after
// it (every segment one bar drawn to its own length; live blocks blue, pending-free orange,
// holes grey, pinning blocks outlined red), the fragmentation metrics, the sweep table with the
// recommended row highlighted, and PyTorch's memory_summary() of the replay.
// scripts/screenshot_report.sh renders it in headless Chromium.
#pragma once

#include <ostream>
#include <string>

#include "analysis/report/report.h"

namespace fragscope {

void WriteHtmlReport(const AnalysisReport& report, std::ostream& out);

// --- Pieces, in html_charts.cc ---

// &, <, >, " escaped.
std::string HtmlEscape(std::string_view text);
// The memory timeline of a rank as an <svg> element.
std::string TimelineSvg(const RankReport& rank);
// The segment map of an OOM's layout as an <svg> element (at most max_segments rows, fragmented
// segments first).
std::string SegmentMapSvg(const OomExplanation& oom, size_t max_segments = 40);

}  // namespace fragscope
