// Parameter count of a ModelSpec, broken down so that the parallel layout can shard it.
//
// Formulas (notation of docs/estimator_reference.md: h hidden, a heads, g KV heads, d_h head dim,
// d_v value head dim, f FFN size, V vocab, L layers, E experts, n(w) the parameters of a norm of
// width w: 2w LayerNorm with bias, w RMSNorm or LayerNorm without bias, 0 non-parametric):
//   attention weights / layer  h*(a d_h) + h*(g d_h) + h*(g d_v) + (a d_v)*h   (Q, K, V, O)
//     MLA (kv_lora_rank r_kv, q_lora_rank r_q, rotary part d_r):
//                              [h r_q + r_q (a d_h) | h (a d_h)] + h (r_kv + d_r)
//                              + r_kv a (d_h - d_r + d_v) + (a d_v) h
//   attention biases / layer   Q, K, V (MLA: r_q + r_kv + d_r) column-parallel; h row-parallel
//   attention norms / layer    q/k norms: d_h each (per head) or a d_h + g d_h (full width);
//                              MLA: r_q + r_kv
//   MLP weights / dense layer  (3 if gated else 2) * h * f;  biases (2f or f) + h
//   experts / MoE layer        E * (MLP with f = moe_ffn_size); router h*E; shared expert MLP
//                              (f = shared_expert_ffn_size) + h (its gate)
//   norms / layer              norms_per_layer * n(h)
//   model                      V h (embedding) + max_positions h (learned) + n(h) (embedding
//                              norm) + n(h) (final norm) + V h (+ V bias) (output layer, untied)
// Llama-2-7B: 2 V h + L (2h^2 + 2 h g d_h + 3 h f + 2h) + h = 6,738,415,616 (reference 8.1).
// GPT-3: L (12h^2 + 13h) + V h + 2048 h + 2h = 174,604,259,328.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

#include "estimator/model_spec.h"
#include "estimator/term.h"

namespace fragscope::estimator {

struct ParameterCount {
  // Invariant: when `architectural` is false every field except total and active is zero.
  bool architectural = false;

  // One transformer block. Every layer has the attention and norms; the dense-MLP fields are per
  // dense layer, the expert, router and shared-expert fields per MoE layer.
  int64_t attention_weights = 0;         // Q, K, V, O matrices (MLA: its five)
  int64_t attention_column_biases = 0;   // Q, K, V biases (split by tensor parallelism)
  int64_t attention_row_biases = 0;      // O bias (replicated under tensor parallelism)
  int64_t attention_norms = 0;           // q/k norms, MLA's q_a and kv_a norms (replicated)
  int64_t mlp_weights = 0;               // dense MLP matrices of a dense layer
  int64_t mlp_column_biases = 0;         // fc1 (and gate) biases
  int64_t mlp_row_biases = 0;            // fc2 bias
  int64_t expert_parameters = 0;         // all routed experts of one MoE layer, weights + biases
  int64_t active_expert_parameters = 0;  // the top-k experts of one MoE layer
  int64_t router = 0;                    // h * E
  int64_t shared_expert = 0;             // the shared-expert MLP of one MoE layer (split by tp)
  int64_t shared_expert_gate = 0;        // its gate, h (replicated)
  int64_t layer_norms = 0;               // the norms of a block
  int64_t dense_layers = 0;              // layers with the dense MLP
  int64_t moe_layers = 0;                // layers with experts
  int64_t per_dense_layer = 0;           // sum of a dense block's fields
  int64_t per_moe_layer = 0;             // sum of an MoE block's fields (all experts)
  int64_t blocks = 0;  // dense_layers * per_dense_layer + moe_layers * per_moe_layer

  // Outside the blocks.
  int64_t embedding = 0;           // V h
  int64_t position_embedding = 0;  // max_positions h (learned positions only)
  int64_t embedding_norm = 0;
  int64_t final_norm = 0;
  int64_t output_layer = 0;  // V h (+ V with a bias) when untied, 0 when tied

  int64_t architectural_total = 0;  // blocks + model-level fields
  int64_t total = 0;                // spec.parameter_count if given, else architectural_total
  int64_t active = 0;               // total with only experts_top_k experts per layer

  // DeepSpeed's "largest layer": the largest single module's own parameters (embedding, output
  // layer or one linear layer). ZeRO-3 gathers it whole.
  int64_t largest_module = 0;
  // Weights multiplied per token in a forward pass: all block matrices (top-k experts only),
  // the router and the output projection (also when tied). 2 x this = forward FLOPs per token.
  int64_t matmul_weights_active = 0;
  // Weights of the linear layers inside the blocks (what QLoRA quantizes to NF4).
  int64_t block_linear_weights = 0;
  // Adafactor's factored second moment: rows + cols per matrix, full size per vector.
  int64_t factored_second_moment = 0;

  // total / architectural_total: scales per-GPU shares when a count is given (1 otherwise).
  double given_count_scale() const {
    return architectural && architectural_total > 0
               ? static_cast<double>(total) / static_cast<double>(architectural_total)
               : 1.0;
  }
};

// Validates `spec` and counts its parameters.
absl::StatusOr<ParameterCount> CountParameters(const ModelSpec& spec);

// Blocks of each kind among the first `layers` layers (stage 0 of a pipeline), dense layers
// first.
struct LayerMix {
  int64_t dense = 0;
  int64_t moe = 0;
};
LayerMix FirstLayers(const ParameterCount& count, int64_t layers);

// Traceable count terms (unit kCount) for --explain: "parameters_per_layer" (architectural
// specs only) and "parameters_total", with the formulas above and their values.
std::vector<Term> ParameterCountTerms(const ModelSpec& spec, const ParameterCount& count);

}  // namespace fragscope::estimator
