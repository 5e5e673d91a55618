// The renderings of a CrossRankReport (cross_rank.h): the terminal table (text), the JSON file
// (schema "fragscope.cross_rank", CROSS_RANK_SCHEMA.md) and a self-contained HTML page with a
// chart of the ranks. The worst rank's full analysis, when the report holds it (`analyze`),
// follows in each: as the text report, as the "fragscope.analysis" document, and as the HTML
// report inside the page.
#pragma once

#include <ostream>

#include "analysis/ranks/cross_rank.h"
#include "analysis/report/text_report.h"
#include "estimator/json_document.h"

namespace fragscope {

inline constexpr char kCrossRankSchema[] = "fragscope.cross_rank";
// Bumped when a field changes meaning or disappears; additions keep the version.
inline constexpr int kCrossRankSchemaVersion = 1;

void RenderCrossRankText(const CrossRankReport& report, const TextReportOptions& options,
                         std::ostream& out);
void WriteCrossRankJson(const CrossRankReport& report, std::ostream& out);
// The document WriteCrossRankJson writes.
estimator::OrderedJson CrossRankJson(const CrossRankReport& report);
void WriteCrossRankHtml(const CrossRankReport& report, std::ostream& out);

}  // namespace fragscope
