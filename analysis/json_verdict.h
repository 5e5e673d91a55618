// The JSON rendering of a JobVerdict ("verdict" in REPORT_SCHEMA.md), shared by the analysis and
// sweep reports.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "analysis/job_verdict.h"
#include "estimator/json_document.h"

namespace fragscope {

// The verdict object. `recommended` is the report's recommended sweep row (null when no setting
// is shown to save the job).
estimator::OrderedJson JsonVerdict(const JobVerdict& v, std::optional<size_t> recommended,
                                   std::string_view recommendation);

}  // namespace fragscope
