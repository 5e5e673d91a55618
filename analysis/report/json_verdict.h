// The JSON rendering of a JobVerdict ("verdict" in REPORT_SCHEMA.md), shared by the analysis and
// sweep reports.
#pragma once

#include "analysis/explain/job_verdict.h"
#include "estimator/json_document.h"

namespace fragscope {

// The verdict object, with its recommended sweep row (null when no setting is shown to save the
// job).
estimator::OrderedJson JsonVerdict(const JobVerdict& v);

}  // namespace fragscope
