// Renderings of a ReportComparison (report_comparison.h): the text report's section (also the
// HTML report's, in a <pre>) and its JSON (REPORT_SCHEMA.md, "prediction").
#pragma once

#include <ostream>

#include "analysis/report/report_comparison.h"
#include "estimator/json_document.h"

namespace fragscope {

// At most this many phases in the text; the JSON has every one.
inline constexpr size_t kComparedPhasesShown = 40;

void RenderComparisonText(const ReportComparison& c, std::ostream& out);
estimator::OrderedJson ComparisonJson(const ReportComparison& c);
// A self-contained HTML page of the comparison (`fragscope diff --html`): no script, no network.
void WriteComparisonHtml(const ReportComparison& c, std::ostream& out);

}  // namespace fragscope
