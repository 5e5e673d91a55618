// Activation memory of training, after Korthikanti et al., "Reducing Activation Recomputation in
// Large Transformer Models" (arXiv:2205.05198), Eq. 1 and Table 2, generalized.
//
// Per layer, 16-bit activations (B = 2 bytes per element) with 1-byte dropout masks, Korthikanti
// stores sbh(34 + 5as/h) bytes: attention 11sbh + 5as^2b, MLP 19sbh, two norm inputs 4sbh. This
// file splits a layer into three parts (m = 1 when dropout is on, else 0; q = a d_h, k = g d_h):
//   R  = s b h (4B + 2m)                 norm inputs, QKV and MLP inputs, two dropout masks;
//                                        not split by tensor parallelism, split by SP
//   S  = s b B (2q + 2k + c f)           Q, K, V, attention output, MLP intermediates;
//                                        c = 2 (GeLU in/out) or 3 (gated: the 2f-wide fc1
//                                        output and the product, fused as in Megatron); / tp
//   A  = a s^2 b (2B + m)                softmax output, its dropout mask and output; / tp;
//                                        absent with selective recompute or flash attention
//   full recompute stores only the layer input B s b h (/ tp with SP).
// MoE layers use f = top_k * moe_ffn_size (each token's experts keep their intermediates); the
// router logits and token dispatch buffers are not modelled.
// With q = k = h (MHA), f = 4h, B = 2, m = 1 this is exactly Table 2:
//   none sbh(10 + 24/t + 5as/(ht)); SP sbh(34/t + 5as/(ht)); selective sbh(10 + 24/t);
//   SP + selective sbh 34/t; full 2sbh.
//
// Pipeline (stage 0, 1F1B): L_s = ceil(L/p) layers times n_f micro-batches in flight:
// n_f = 1 if p = 1, min(p, m_b) (m_b micro-batches per step), or p (1 + (p-1)/(p v)) when
// interleaved with v virtual stages (Megatron; the m_b cap is not applied there).
// Stage 0 also holds the token ids (8 s b bytes, int64) and the embedding dropout mask
// (s b h, / tp with SP) per micro-batch in flight; when p = 1 it is also the last stage and
// holds the output layer and loss, 4 s b h (1 + V/h) / tp.
// Recompute working set (fragscope's addition, not in Korthikanti's totals): while a layer's
// backward runs, its recomputed tensors are live: one layer's un-recomputed activations for full
// recompute, one layer's A for selective recompute.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "estimator/model_spec.h"
#include "estimator/term.h"
#include "estimator/training_config.h"

namespace fragscope::estimator {

struct LayerActivations {
  double replicated = 0;        // R on this GPU (after SP)
  double split = 0;             // S / tp
  double attention_scores = 0;  // A / tp, or 0
  double full_recompute = 0;    // stored input under full recompute, else 0
  std::string formula;
  std::string values;

  // Bytes one layer keeps for its backward on this GPU.
  double stored() const {
    return full_recompute > 0 ? full_recompute : replicated + split + attention_scores;
  }
};

// One transformer layer's activations for one micro-batch on one GPU.
//   REQUIRES: spec.has_architecture().
LayerActivations ActivationsPerLayer(const ModelSpec& spec, const TrainingConfig& config);

// n_f above.
double MicroBatchesInFlight(const ParallelLayout& layout);

// Terms "activations", "activations_embedding", "activations_output" (p == 1 only) and
// "recompute_working_set" (selective/full recompute). Error if the spec has no architecture.
absl::StatusOr<std::vector<Term>> ActivationTerms(const ModelSpec& spec,
                                                  const TrainingConfig& config);

}  // namespace fragscope::estimator
