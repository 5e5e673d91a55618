// Prefill and decode time by the roofline model: time = max(FLOPs / (peak * e_c),
// bytes / (bandwidth * e_b)), for the whole model split over tp GPUs working in parallel (a
// request visits pipeline stages one after another, so pp does not shorten it); communication
// is ignored.
//
//   M        weights multiplied per token (all block matrices, top-k experts, output layer)
//   prefill  FLOPs = 2 M s_p b + 4 L s_p^2 (a d_h) b     (attention scores and values; causal
//            masking not exploited, as llm-analysis); bytes = all weights read once
//   decode   per token at context c: FLOPs = 2 M b + 4 L c (a d_h) b;
//            bytes = dense weights + expert weights * min(1, k b / E) + the KV cache (b, c)
// Efficiencies default to 1 (the ideal lower bound, as llm-analysis's "ideal" runs); its README
// suggests e_c <= 0.7 and e_b ~ 0.9 for inference.
// Sources: kipp.ly "Transformer inference arithmetic"; cli99/llm-analysis; reference 5.
// The seed document's TTFT adds compute and memory time (45.9 + 9.3 = 55.3 ms for 7 B on an
// A100); a roofline takes the maximum (45.9 ms). See README.md, "Known errors in the seeds".
#pragma once

#include <vector>

#include "absl/status/statusor.h"

#include "estimator/gpu_presets.h"
#include "estimator/inference_memory.h"
#include "estimator/model_spec.h"
#include "estimator/term.h"

namespace fragscope::estimator {

struct RooflineOptions {
  double compute_efficiency = 1.0;    // fraction of peak FLOP/s reached, (0, 1]
  double bandwidth_efficiency = 1.0;  // fraction of peak bandwidth reached, (0, 1]
};

// Terms (units kFlops, kBytes, kSeconds): prefill_flops, prefill_bytes, prefill_seconds (the
// whole batch's prefill: every sequence's time to first token when they are prefilled together),
// prefill_seconds_per_sequence (batch > 1 only: one sequence prefilled alone), decode_flops,
// decode_bytes, decode_seconds (per output token of every sequence, at the full context).
// A bare parameter count uses M = P and no attention term; the KV cache needs an architecture.
absl::StatusOr<std::vector<Term>> RooflineTerms(const ModelSpec& spec,
                                                const InferenceConfig& config, const GpuSpec& gpu,
                                                const RooflineOptions& options);

}  // namespace fragscope::estimator
