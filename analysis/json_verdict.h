// The JSON rendering of a JobVerdict ("verdict" in REPORT_SCHEMA.md), shared by the analysis and
// sweep reports.
#pragma once

#include <cstddef>
#include <optional>

#include "analysis/job_verdict.h"
#include "analysis/json_writer.h"

namespace fragscope {

// Writes the verdict object, with its recommended sweep row (null when no setting is shown to
// save the job).
void WriteJsonVerdict(JsonWriter& j, const JobVerdict& v);

}  // namespace fragscope
