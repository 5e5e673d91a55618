// The JSON rendering of an AnalysisReport. The schema is documented, with its version, in
// analysis/REPORT_SCHEMA.md; tests/analysis/data/report_golden.json pins it.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "analysis/report/report.h"
#include "estimator/json_document.h"

namespace fragscope {

struct JsonReportOptions {
  // Wall-clock durations ("seconds" fields); off for byte-stable output (golden tests).
  bool include_timings = true;
};

// The document WriteJsonReport writes (the cross-rank report embeds it).
estimator::OrderedJson JsonReport(const AnalysisReport& report, const JsonReportOptions& options);
void WriteJsonReport(const AnalysisReport& report, const JsonReportOptions& options,
                     std::ostream& out);

// An address or stream handle as the JSON reports write them ("0x7f0000000000": JSON numbers
// cannot carry 64 bits exactly).
std::string HexAddress(uint64_t v);

// Bytes by role (`{"weights": N, ...}`), the roles that hold nothing left out.
estimator::OrderedJson RoleBytesJson(const RoleBytes& roles);
// Bytes by module (DemandCollector::LiveModules' rows): `[{"module": M, "bytes": N}, ...]`.
estimator::OrderedJson ModuleBytesJson(const std::vector<DemandTerm>& modules);

// A layout's totals (REPORT_SCHEMA.md, "layout"), without its segments.
estimator::OrderedJson LayoutJson(const LayoutSummary& layout);

// `fragscope sweep --json`: the sweep alone (schema "fragscope.sweep"): the trace and device
// members and the sweep object of the analysis schema, without the analysis it did not run.
inline constexpr int kSweepSchemaVersion = 1;
void WriteJsonSweepReport(const RankReport& rank, const JsonReportOptions& options,
                          std::ostream& out);

}  // namespace fragscope
