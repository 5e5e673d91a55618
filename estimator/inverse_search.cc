#include "estimator/inverse_search.h"

#include <algorithm>
#include <functional>

#include "absl/status/status.h"

#include "estimator/inference_memory.h"
#include "estimator/status_macros.h"
#include "estimator/training_memory.h"

namespace fragscope::estimator {
namespace {

// The largest value a configuration accepts (model_spec.h).
constexpr int64_t kSearchLimit = kMaxSequenceOrBatch;

// Largest x in [1, kSearchLimit] with device_bytes(x) <= capacity, for monotone device_bytes.
absl::StatusOr<int64_t> LargestFitting(
    const std::function<absl::StatusOr<double>(int64_t)>& device_bytes, double capacity) {
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const double at_one, device_bytes(1));
  if (at_one > capacity) return 0;
  int64_t fits = 1;
  int64_t fails = 2;
  while (true) {  // Invariant: fits fits; fails is the next candidate.
    FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const double bytes, device_bytes(fails));
    if (bytes > capacity) break;
    fits = fails;
    if (fails >= kSearchLimit) return fits;
    fails *= 2;
  }
  while (fails - fits > 1) {  // Invariant: fits fits, fails does not.
    const int64_t mid = fits + (fails - fits) / 2;
    FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const double bytes, device_bytes(mid));
    if (bytes > capacity) {
      fails = mid;
    } else {
      fits = mid;
    }
  }
  return fits;
}

absl::StatusOr<double> TrainingBytes(const ModelSpec& spec, const TrainingConfig& config) {
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const MemoryEstimate estimate,
                                       EstimateTraining(spec, config));
  return estimate.DeviceBytes();
}

absl::StatusOr<double> InferenceBytes(const ModelSpec& spec, const InferenceConfig& config) {
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const MemoryEstimate estimate,
                                       EstimateInference(spec, config));
  return estimate.DeviceBytes();
}

int64_t& Dimension(ParallelLayout& layout, ScaleDimension dimension) {
  switch (dimension) {
    case ScaleDimension::kTensorParallel:
      return layout.tp;
    case ScaleDimension::kPipelineParallel:
      return layout.pp;
    case ScaleDimension::kDataParallel:
      break;
  }
  return layout.dp;
}

// Smallest value of `dimension` (others fixed) whose layout fits. `estimate` returns the device
// bytes of a layout, or a validation error (that candidate is skipped). dp is bisected (ZeRO
// memory never grows with dp); tp and pp are scanned upwards to `limit`.
absl::StatusOr<GpuCountResult> SmallestCount(
    ParallelLayout base, ScaleDimension dimension, double capacity, int64_t max_gpus, int64_t limit,
    const std::function<absl::StatusOr<double>(const ParallelLayout&)>& estimate) {
  GpuCountResult result;
  const int64_t step = dimension == ScaleDimension::kDataParallel ? base.ep : 1;
  Dimension(base, dimension) = step;
  const int64_t others = base.gpus() / step;
  const int64_t max_value = std::min(limit, max_gpus / others);
  auto try_value = [&](int64_t value) -> absl::StatusOr<double> {
    ParallelLayout layout = base;
    Dimension(layout, dimension) = value;
    return estimate(layout);
  };
  auto accept = [&](int64_t value, double bytes) {
    result.found = true;
    result.layout = base;
    Dimension(result.layout, dimension) = value;
    result.device_bytes = bytes;
  };
  if (dimension == ScaleDimension::kDataParallel) {
    int64_t hi = max_value / step;  // in units of step
    if (hi < 1) return result;
    FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(double hi_bytes, try_value(hi * step));
    if (hi_bytes > capacity) return result;
    int64_t lo = 0;  // Invariant: lo * step does not fit (or is 0), hi * step fits.
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const double bytes, try_value(mid * step));
      if (bytes <= capacity) {
        hi = mid;
        hi_bytes = bytes;
      } else {
        lo = mid;
      }
    }
    accept(hi * step, hi_bytes);
    return result;
  }
  for (int64_t value = 1; value <= max_value; ++value) {
    absl::StatusOr<double> bytes = try_value(value);
    if (!bytes.ok()) continue;  // e.g. tp not dividing the heads
    if (*bytes <= capacity) {
      accept(value, *bytes);
      return result;
    }
  }
  return result;
}

// Upper bound for a scanned dimension: tp <= heads, pp <= layers.
int64_t DimensionLimit(const ModelSpec& spec, ScaleDimension dimension) {
  if (!spec.has_architecture()) return int64_t{1} << 20;
  switch (dimension) {
    case ScaleDimension::kTensorParallel:
      return spec.num_heads;
    case ScaleDimension::kPipelineParallel:
      return spec.num_layers;
    case ScaleDimension::kDataParallel:
      break;
  }
  return int64_t{1} << 20;
}

}  // namespace

absl::StatusOr<int64_t> LargestMicroBatch(const ModelSpec& spec, const TrainingConfig& config,
                                          double capacity_bytes) {
  return LargestFitting(
      [&](int64_t value) {
        TrainingConfig c = config;
        c.micro_batch = value;
        return TrainingBytes(spec, c);
      },
      capacity_bytes);
}

absl::StatusOr<int64_t> LargestSequence(const ModelSpec& spec, const TrainingConfig& config,
                                        double capacity_bytes) {
  return LargestFitting(
      [&](int64_t value) {
        TrainingConfig c = config;
        c.seq_len = value;
        return TrainingBytes(spec, c);
      },
      capacity_bytes);
}

absl::StatusOr<int64_t> LargestInferenceBatch(const ModelSpec& spec, const InferenceConfig& config,
                                              double capacity_bytes) {
  return LargestFitting(
      [&](int64_t value) {
        InferenceConfig c = config;
        c.batch = value;
        return InferenceBytes(spec, c);
      },
      capacity_bytes);
}

absl::StatusOr<int64_t> LargestContext(const ModelSpec& spec, const InferenceConfig& config,
                                       double capacity_bytes) {
  return LargestFitting(
      [&](int64_t value) {
        InferenceConfig c = config;
        c.context = value;
        return InferenceBytes(spec, c);
      },
      capacity_bytes);
}

absl::StatusOr<GpuCountResult> SmallestGpuCount(const ModelSpec& spec, const TrainingConfig& config,
                                                double capacity_bytes, ScaleDimension dimension,
                                                int64_t max_gpus) {
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(TrainingBytes(spec, config).status());
  return SmallestCount(config.layout, dimension, capacity_bytes, max_gpus,
                       DimensionLimit(spec, dimension), [&](const ParallelLayout& layout) {
                         TrainingConfig c = config;
                         c.layout = layout;
                         return TrainingBytes(spec, c);
                       });
}

absl::StatusOr<GpuCountResult> SmallestGpuCountForInference(const ModelSpec& spec,
                                                            const InferenceConfig& config,
                                                            double capacity_bytes,
                                                            ScaleDimension dimension,
                                                            int64_t max_gpus) {
  if (dimension == ScaleDimension::kDataParallel) {
    return absl::InvalidArgumentError(
        "scale = dp: data-parallel replicas do not reduce inference memory; scale tp or pp");
  }
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(InferenceBytes(spec, config).status());
  return SmallestCount(config.layout, dimension, capacity_bytes, max_gpus,
                       DimensionLimit(spec, dimension), [&](const ParallelLayout& layout) {
                         InferenceConfig c = config;
                         c.layout = layout;
                         return InferenceBytes(spec, c);
                       });
}

}  // namespace fragscope::estimator
