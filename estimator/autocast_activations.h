// Activation memory of a PyTorch training step as transformers' eager modules store it under
// torch.autocast (bf16 or fp16) with fp32 parameters, on one GPU: `--activation-model
// torch-autocast`. Korthikanti's formula (activation_memory.h) describes Megatron's fused
// kernels with a 16-bit residual stream; an eager PyTorch job keeps much more, and where it
// keeps it was measured tensor by tensor (scripts/gpu/activation_probe.py, saved-tensor hooks on
// an H100, torch 2.11, transformers 5.17; estimator/README.md, "Measured accuracy").
//
// Per layer, E = 2 bytes (16-bit activations), m = 1 with dropout, q = a d_h, k = g d_h:
//   norms    2 N s b h          N = 4 (LayerNorm saves its fp32 input: the residual stream is
//                               fp32 because the embeddings are) or 8 (transformers' Python
//                               RMSNorm also saves the fp32 normalized tensor)
//   casts    E s b h (c_qkv + c_mlp)
//                               autocast casts activations per op, not cached: one 16-bit copy
//                               of the normalized input per projection reading it: c_qkv = 1
//                               (fused_qkv) or 3, c_mlp = 2 (gated) or 1
//   attention (SDPA flash / memory-efficient)
//            E s b (2q + 2k)    q, k, v and the output (separate projections), or
//            E s b (2q + 4k)    with fused_qkv: q is a view that keeps the whole QKV output, and
//                               k, v are saved as contiguous copies
//            + a s^2 b (4 + E + m) without flash attention: eager attention's fp32 softmax, its
//                               16-bit copy and dropout mask (derived from the code, not measured)
//   MLP      4 E s b f          gated: gate and up outputs, the activation, the product
//            s b f (2E + 12)    python_gelu: fc output, three fp32 intermediates of the Python
//                               tanh GeLU (torch.pow runs in fp32 under autocast), the cast
//                               input of the second projection
//            2 E s b f          otherwise: fc output and the activation's output
//   dropout  2 m s b h          the two hidden dropout masks (attention dropout is in SDPA)
// Output layer and loss: 4 s b V (the loss's fp32 log-softmax) + N s b h (final norm) + E s b h
// (the cast input of the output projection). Embedding: 8 s b (token ids) + m s b h.
// Loss backward: 8 s b V, two fp32 logits-sized buffers alive together at the start of the
// backward, which is where the step's peak is (measured: peak - end of forward = 8 s b V).
// The 16-bit weight copies saved for the backward are the estimator's "weights" term.
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

// Terms "activations", "activations_embedding", "activations_output" and "loss_backward".
// Errors name the flag for what this model does not describe: mixed precision only; no tensor,
// pipeline or sequence parallelism; no recompute; no MoE; the spec must have an architecture.
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
