// Per-GPU memory of inference: weights, KV cache, the 1.2x overhead rule as its own line, and
// the explicit device overheads.
//
//   weights   P_local * bytes(dtype)             fp32 4, fp16/bf16 2, fp8/int8 1, int4 0.5
//             (accelerate's dtype table; Transformer Math 101). Real int4 formats add group
//             scales (about 0.25 bit/weight at group size 128), not counted.
//   KV cache  2 * L_s * g_rank * d_h * context * batch * bytes(kv dtype)
//             K and V, g KV heads (GQA/MQA aware), g_rank = g / tp, or 1 (replicated) when
//             tp > g, as in llm-analysis; context = prompt + generated tokens held.
//             Llama-2-7B: 524,288 B/token; Llama-2-70B 327,680; Llama-3-8B 131,072 (fp16).
//   overhead  (factor - 1) * weights, factor 1.2 by default: EleutherAI, Transformer Math 101,
//             "Total ~ 1.2 x model memory"; the HF Space's "up to 20 %". Reported as a term of
//             its own so that it is never mistaken for a measured quantity.
// The CUDA context and workspace are separate terms (overheads.h); the 20 % rule was calibrated
// on totals that include them, so the sum double-counts a little; set the factor to 1 to drop it.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"

#include "estimator/dtype.h"
#include "estimator/model_spec.h"
#include "estimator/overheads.h"
#include "estimator/parallel_layout.h"
#include "estimator/term.h"

namespace fragscope::estimator {

struct InferenceConfig {
  DType weights = DType::kBf16;
  DType kv_cache = DType::kBf16;
  int64_t batch = 1;          // concurrent sequences
  int64_t context = 2048;     // tokens per sequence held in the KV cache
  int64_t prompt_tokens = 0;  // prefill length for timing; 0 = context
  // false: no KV cache is held (one forward pass of batch x context tokens, transformers'
  // use_cache=False); the KV cache term is left out.
  bool use_kv_cache = true;
  // The autocast dtype the forward runs under, when the weights are held in another (fp32
  // weights under bf16 autocast); said in the workload line.
  std::optional<DType> autocast;
  ParallelLayout layout;         // tp and pp split the model; dp (replicas) is ignored
  double overhead_factor = 1.2;  // >= 1; 1 removes the overhead line's bytes
  DeviceOverheads overheads;
};

absl::Status ValidateInferenceConfig(const InferenceConfig& config);

// KV heads held by one tensor-parallel rank: g / tp, or 1 when tp > g.
int64_t KvHeadsPerRank(const ModelSpec& spec, const ParallelLayout& layout);

// KV-cache bytes per token of one sequence on this GPU (stage 0, tensor rank 0).
//   REQUIRES: spec.has_architecture().
double KvCacheBytesPerToken(const ModelSpec& spec, DType kv_cache, const ParallelLayout& layout);

absl::StatusOr<MemoryEstimate> EstimateInference(const ModelSpec& spec,
                                                 const InferenceConfig& config);

}  // namespace fragscope::estimator
