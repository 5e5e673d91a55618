// libFuzzer target for model spec files (estimator/model_spec_json.h: the strict JSON reader,
// fragscope's own schema and Hugging Face config.json), and the estimates made from what they
// accept.
//
// Properties checked on every input: nothing crashes or trips a sanitizer; a spec that parses
// passes ValidateModelSpec; every training and inference estimate made from it (default
// configurations, and the torch-autocast activation model) either fails with a status or has
// only finite, non-negative terms.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include "absl/strings/string_view.h"

#include "allocator/check.h"
#include "estimator/inference_memory.h"
#include "estimator/model_spec_json.h"
#include "estimator/training_memory.h"

namespace {

void CheckTerms(const absl::StatusOr<fragscope::estimator::MemoryEstimate>& estimate) {
  if (!estimate.ok()) return;
  for (const fragscope::estimator::Term& term : estimate->terms) {
    FRAGSCOPE_CHECK(std::isfinite(term.value) && term.value >= 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace est = fragscope::estimator;
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<est::ModelSpec> spec = est::ModelSpecFromJson(input);
  if (!spec.ok()) return 0;
  FRAGSCOPE_CHECK(est::ValidateModelSpec(*spec).ok());
  est::TrainingConfig training;
  CheckTerms(est::EstimateTraining(*spec, training));
  training.activation_model = est::ActivationModel::kTorchAutocast;
  CheckTerms(est::EstimateTraining(*spec, training));
  CheckTerms(est::EstimateInference(*spec, est::InferenceConfig()));
  return 0;
}
