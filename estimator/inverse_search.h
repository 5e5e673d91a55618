// Inverse questions: the largest micro-batch, sequence or context that fits a GPU, and the
// smallest GPU count for a parallel layout.
//
// "Fits" means the estimate's device total (every device term, overheads included) is at most
// capacity_bytes. Device memory grows monotonically with batch, sequence and context, so the
// largest fitting value is found by doubling then bisection (at most ~60 estimates); a result
// of 0 means even 1 does not fit. The GPU count search scales one dimension of the given layout
// (dp, tp or pp) and keeps the others; tp candidates are the values the layout validation
// accepts (divisors of heads, KV heads and FFN size), dp steps in multiples of ep. Memory is
// not monotone in every dimension (ZeRO-0 does not shrink with dp), so tp and pp candidates are
// tried in increasing order and dp is searched up to max_gpus.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"

#include "estimator/inference_memory.h"
#include "estimator/model_spec.h"
#include "estimator/parallel_layout.h"
#include "estimator/training_config.h"

namespace fragscope::estimator {

// Largest values that fit; 0 when even 1 does not. Errors are the estimator's validation errors.
absl::StatusOr<int64_t> LargestMicroBatch(const ModelSpec& spec, const TrainingConfig& config,
                                          double capacity_bytes);
absl::StatusOr<int64_t> LargestSequence(const ModelSpec& spec, const TrainingConfig& config,
                                        double capacity_bytes);
absl::StatusOr<int64_t> LargestInferenceBatch(const ModelSpec& spec, const InferenceConfig& config,
                                              double capacity_bytes);
absl::StatusOr<int64_t> LargestContext(const ModelSpec& spec, const InferenceConfig& config,
                                       double capacity_bytes);

enum class ScaleDimension : uint8_t { kDataParallel, kTensorParallel, kPipelineParallel };

struct GpuCountResult {
  bool found = false;       // false: nothing up to max_gpus fits
  ParallelLayout layout;    // the smallest fitting layout when found
  double device_bytes = 0;  // its per-GPU total
};

absl::StatusOr<GpuCountResult> SmallestGpuCount(const ModelSpec& spec, const TrainingConfig& config,
                                                double capacity_bytes, ScaleDimension dimension,
                                                int64_t max_gpus = 65536);
// Inference scales tp or pp (dp adds replicas and never helps: an error).
absl::StatusOr<GpuCountResult> SmallestGpuCountForInference(const ModelSpec& spec,
                                                            const InferenceConfig& config,
                                                            double capacity_bytes,
                                                            ScaleDimension dimension,
                                                            int64_t max_gpus = 65536);

}  // namespace fragscope::estimator
