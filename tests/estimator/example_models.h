// The models and configurations that the estimator tests share.
#pragma once

#include <cstdint>

#include "estimator/model_spec.h"
#include "estimator/training_config.h"

namespace fragscope::testing {

// A model known only by its parameter count, without the architecture that activations and the KV
// cache need (a bare `fragscope estimate --params N`).
inline estimator::ModelSpec BareModel(int64_t params) {
  estimator::ModelSpec spec;
  spec.name = "bare";
  spec.parameter_count = params;
  return spec;
}

// The training of estimator/README.md's first example, for llama-2-13b: bf16 with AdamW, ZeRO-1
// over dp = 8, sequence 4096, micro-batch 1, selective recompute.
inline estimator::TrainingConfig ReadmeExampleTraining() {
  estimator::TrainingConfig config;
  config.layout.dp = 8;
  config.zero_stage = 1;
  config.seq_len = 4096;
  config.recompute = estimator::Recompute::kSelective;
  return config;
}

}  // namespace fragscope::testing
