// `analyze --predict`: the log's recorded job (Note [Model records]) predicted by the Python
// package (`fragscope predict`) and analyzed under the same device, cap and settings, so that the
// report sets the log and the prediction side by side (RankReport::prediction): peaks, OOMs and
// each marker phase. Where no prediction can be made (no model record, no Python with torch, a
// job the predictor refuses) the report says why in a warning, and the estimator's footprint is
// what the verdict has.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "analysis/analyzer.h"
#include "analysis/report/report.h"

namespace fragscope::cli {

// The `fragscope predict` arguments for the job of `record` (a model record's JSON), its config
// written to `config_path`, its log to `out_path`, kernels chosen as on `gpu`, the allocator
// settings `conf`, `steps` steps, and of a parallel job the log's `rank`. Errors name the
// record's key that cannot be predicted.
absl::StatusOr<std::vector<std::string>> PredictArguments(
    const std::string& record, const std::string& config_path, const std::string& out_path,
    const std::string& gpu, const std::string& conf, int steps, int32_t rank = 0);

// Predicts `report`'s recorded job and sets report.prediction, or adds a warning that says why
// not. `options`: the analysis of the log (its device, cap and settings are the prediction's).
void PredictBeside(const AnalysisOptions& options, RankReport& report);

}  // namespace fragscope::cli
