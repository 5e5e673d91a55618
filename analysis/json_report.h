// The JSON rendering of an AnalysisReport. The schema is documented, with its version, in
// analysis/REPORT_SCHEMA.md; tests/analysis/data/report_golden.json pins it.
#pragma once

#include <ostream>

#include "analysis/report.h"

namespace fragscope {

struct JsonReportOptions {
  // Wall-clock durations ("seconds" fields); off for byte-stable output (golden tests).
  bool include_timings = true;
};

void WriteJsonReport(const AnalysisReport& report, const JsonReportOptions& options,
                     std::ostream& out);

}  // namespace fragscope
