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

absl::StatusOr<double> DeviceBytes(const ModelSpec& spec, const TrainingConfig& config) {
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const MemoryEstimate estimate,
                                       EstimateTraining(spec, config));
  return estimate.DeviceBytes();
}

absl::StatusOr<double> DeviceBytes(const ModelSpec& spec, const InferenceConfig& config) {
  FRAGSCOPE_ESTIMATOR_ASSIGN_OR_RETURN(const MemoryEstimate estimate,
                                       EstimateInference(spec, config));
  return estimate.DeviceBytes();
}

// Largest value of `config.*field` that fits, the other settings fixed.
template <typename Config>
absl::StatusOr<int64_t> LargestFittingField(const ModelSpec& spec, const Config& config,
                                            int64_t Config::*field, double capacity) {
  return LargestFitting(
      [&](int64_t value) {
        Config c = config;
        c.*field = value;
        return DeviceBytes(spec, c);
      },
      capacity);
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

// Smallest value of `dimension` (others fixed) whose layout fits, after checking `config` itself.
// A candidate layout the configuration refuses (a validation error) is skipped. dp is bisected
// (ZeRO memory never grows with dp); tp and pp are scanned upwards to DimensionLimit.
template <typename Config>
absl::StatusOr<GpuCountResult> SmallestCount(const ModelSpec& spec, const Config& config,
                                             ScaleDimension dimension, double capacity,
                                             int64_t max_gpus) {
  FRAGSCOPE_ESTIMATOR_RETURN_IF_ERROR(DeviceBytes(spec, config).status());
  ParallelLayout base = config.layout;
  GpuCountResult result;
  const int64_t step = dimension == ScaleDimension::kDataParallel ? base.ep : 1;
  Dimension(base, dimension) = step;
  const int64_t others = base.gpus() / step;
  const int64_t max_value = std::min(DimensionLimit(spec, dimension), max_gpus / others);
  auto try_value = [&](int64_t value) -> absl::StatusOr<double> {
    Config c = config;
    c.layout = base;
    Dimension(c.layout, dimension) = value;
    return DeviceBytes(spec, c);
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

}  // namespace

absl::StatusOr<int64_t> LargestMicroBatch(const ModelSpec& spec, const TrainingConfig& config,
                                          double capacity_bytes) {
  return LargestFittingField(spec, config, &TrainingConfig::micro_batch, capacity_bytes);
}

absl::StatusOr<int64_t> LargestSequence(const ModelSpec& spec, const TrainingConfig& config,
                                        double capacity_bytes) {
  return LargestFittingField(spec, config, &TrainingConfig::seq_len, capacity_bytes);
}

absl::StatusOr<int64_t> LargestInferenceBatch(const ModelSpec& spec, const InferenceConfig& config,
                                              double capacity_bytes) {
  return LargestFittingField(spec, config, &InferenceConfig::batch, capacity_bytes);
}

absl::StatusOr<int64_t> LargestContext(const ModelSpec& spec, const InferenceConfig& config,
                                       double capacity_bytes) {
  return LargestFittingField(spec, config, &InferenceConfig::context, capacity_bytes);
}

absl::StatusOr<GpuCountResult> SmallestGpuCount(const ModelSpec& spec, const TrainingConfig& config,
                                                double capacity_bytes, ScaleDimension dimension,
                                                int64_t max_gpus) {
  return SmallestCount(spec, config, dimension, capacity_bytes, max_gpus);
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
  return SmallestCount(spec, config, dimension, capacity_bytes, max_gpus);
}

}  // namespace fragscope::estimator
