// Activation memory of a PyTorch training step as transformers' eager modules store it under
// torch.autocast (bf16 or fp16) with fp32 parameters, on one GPU: `--activation-model
// torch-autocast`. Korthikanti's formula (activation_memory.h) describes Megatron's fused
// kernels with a 16-bit residual stream; an eager PyTorch job keeps much more, and where it
// keeps it was measured tensor by tensor: on an H100 for GPT-2 and a Llama
// (scripts/gpu/activation_probe.py, saved-tensor hooks, torch 2.11, transformers 5.17), and for
// the other architectures under fragscope's predictor (scripts/estimator/saved_tensors_probe.py;
// estimator/README.md, "Measured accuracy").
//
// Per layer, E = 2 bytes (16-bit activations), m = 1 with dropout, q = a d_h, k = g d_h:
//   norms    n N s b h          n norms per layer (1 with a shared parallel-attention norm, 4 in
//                               Gemma 2/3); N = 4 (LayerNorm saves its fp32 input: the residual
//                               stream is fp32 because the embeddings are) or 8 (transformers'
//                               Python RMSNorm also saves the fp32 normalized tensor)
//   qk_norms 6 s b (q + k)      q/k norms (per head or full width) read 16-bit projections: an
//                               fp32 copy and the 16-bit normalized tensor
//   casts    E s b h c          autocast casts activations per op, not cached: one 16-bit copy
//                               of the normalized input per projection reading it: c = c_qkv
//                               (1 fused, 3 separate, 2 for MLA's q_a and kv_a) + c_mlp (2 gated,
//                               1 with fused gate-up or plain); an MoE layer: + 1 (router) + 2
//                               (a shared expert's gate and up) + 1 (its sigmoid gate)
//   attention (SDPA flash / memory-efficient)
//            E s b (2q + 2k)    q, k, v and the output (separate projections), or
//            E s b (2q + 4k)    with fused_qkv: q is a view that keeps the whole QKV output, and
//                               k, v are saved as contiguous copies
//            MLA: E s b a (2 d_h + d_h - d_r + d_v + d_v) + 8 s b (r_q + r_kv)
//                               q, the expanded k, kv_b's output (v is a view of it), the
//                               output; the q_a / kv_a norms' fp32 copy, normalized tensor, cast
//            math kernel (Falcon's one key/value head without enable_gqa):
//                               E s b q + 4 s b (q + 2k): the output's cast, fp32 q, k, v
//   scores   a s^2 b (4 + E + m) eager attention (no --flash-attention): the fp32 softmax, its
//                               16-bit copy, the dropout mask; 4 a s^2 b for the math kernel
//   MLP      4 E s b f          gated: gate and up outputs, the activation, the product
//            s b f (2E + 12)    python_gelu: fc output, three fp32 intermediates of the Python
//                               tanh GeLU (torch.pow runs in fp32 under autocast), the cast
//                               input of the second projection
//            E s b f            ReLU: its output is the second projection's input
//            2 E s b f          otherwise: fc output and the activation's output
//   MoE layers (transformers 5's experts: grouped matmuls on the fp32 parameters, no autocast),
//   T = s b top_k routed (token, expert) pairs:
//     router  4 s b E + 12 s b top_k + 29 T   fp32 softmax, top-k indices and weights, the
//                               grouping's int64 indices, fp32 weights and bool mask per pair
//     experts 4 T (4 f_e + 2 h) fp32 gathered input, gate-up output, activation, product, down
//                               output
//     shared expert 4 E s b f_s (+ E s b h with its sigmoid gate: the output it scales)
//   dropout  2 m s b h          the two hidden dropout masks (attention dropout is in SDPA)
// Dense layers (all of a dense model, DeepSeek's first_k_dense_replace) and MoE layers are two
// terms. Output layer and loss: 4 s b V (the loss's fp32 log-softmax; + E s b V, the tanh's output,
// with logit soft-capping) + N s b h (final norm) +
// E s b h (the cast input of the output projection). Embedding: 8 s b (token ids) + m s b h.
// Loss backward: 8 s b V, two fp32 logits-sized buffers alive together at the start of the
// backward (measured: peak - end of forward = 8 s b V).
// On a tensor- or pipeline-parallel rank: autocast_parallel.h. Under LoRA: lora_activations.h.
// The 16-bit weight copies saved for the backward are the estimator's "weights" term; which of
// the step's moments is the peak is decided in training_memory.cc (term.h, StepMoment).
#pragma once

#include <optional>
#include <vector>

#include "absl/status/statusor.h"

#include "estimator/model_spec.h"
#include "estimator/term.h"
#include "estimator/training_config.h"

namespace fragscope::estimator {

// Bytes one layer keeps for its backward, by the formula above.
//   REQUIRES: spec.has_architecture().
double AutocastBytesPerLayer(const ModelSpec& spec, const TrainingConfig& config);

// Terms "activations" (dense layers), "activations_moe" (MoE layers), "activations_embedding",
// "activations_output" and "loss_backward" (the last two, and "activations_pipeline_outputs",
// on the last pipeline rank only); tensor- and pipeline-parallel ranks as autocast_parallel.h
// describes them. Errors name the flag for what this model does not describe: mixed precision
// only; tp only with sequence parallelism, and neither tp nor pp on MoE, MLA or math-attention
// models nor together; no recompute; the spec must have an architecture.
absl::StatusOr<std::vector<Term>> AutocastActivationTerms(const ModelSpec& spec,
                                                          const TrainingConfig& config);

// The term "attention_backward", alive only at the step moment of that name, when the layers
// store s^2 scores (eager attention or SDPA's math kernel; empty otherwise): the softmax backward
// of the last layer allocates two fp32 score-sized tensors (the gradient of the probabilities and
// of the scores) after the output layer's fp32 gradient, the last layer's MLP and output
// projection gradients and the residual stream's fp32 gradient exist, and after their 16-bit
// weight copies, the MLP's activations and the loss's tensors were freed:
//   4 V h + 4 (W_mlp + W_o) + 8 s b h + 2 (4 a s^2 b)
//     - [2 V h + 2 (W_mlp + W_o) + mlp + E s b h c_mlp + E s b q]
// with W_mlp, W_o one layer's MLP and output-projection weights. Read from the predictor's
// allocations of Falcon (estimator/README.md).
std::optional<Term> AttentionBackwardTerm(const ModelSpec& spec, const TrainingConfig& config);

}  // namespace fragscope::estimator
