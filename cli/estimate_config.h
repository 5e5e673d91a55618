// `fragscope estimate`: the estimator's inputs built from the parsed flags (estimate_flags.h): the
// model, the training or inference configuration, the GPU. Defaults are the estimator's own; a
// flag overrides one field. Every error names the flag (and its value) that caused it, so the
// command can print it as is.
#pragma once

#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "cli/estimate_flags.h"
#include "estimator/gpu_presets.h"
#include "estimator/inference_memory.h"
#include "estimator/model_spec.h"
#include "estimator/training_config.h"

namespace fragscope::cli::estimate {

// The model of --preset or --model-json (not both), or a bare --params count; --params with a
// model replaces its parameter count. The result is validated.
absl::StatusOr<estimator::ModelSpec> BuildModel(const Flags& flags);

// The training configuration of the parallelism, training and overhead flags.
absl::StatusOr<estimator::TrainingConfig> BuildTraining(const Flags& flags);

// The inference configuration of the parallelism, inference and overhead flags (the roofline
// efficiencies --mfu and --bw-efficiency are not part of it).
absl::StatusOr<estimator::InferenceConfig> BuildInference(const Flags& flags);

// Flags meaningful only in one mode are rejected in the other, so that a typo'd mode does not
// silently ignore them.
absl::Status CheckModeFlags(const Flags& flags, bool training);

// The GPU of --gpu, with --gpu-mem-gib overriding its capacity (alone: a "custom" GPU of that
// capacity and no compute figures); nullopt when neither is given.
absl::StatusOr<std::optional<estimator::GpuSpec>> BuildGpu(const Flags& flags);

}  // namespace fragscope::cli::estimate
