// Activations of a LoRA step under torch.autocast (peft's LoRA layers on a frozen base held in
// 16 bits, fp32 adapters: fragscope's predictor's `--lora`), for the Llama-family decoders it was
// read from (RMSNorm, gated MLP, separate projections: Llama, Mistral, Qwen2). With E = 2, r the
// adapter rank, d_in each adapted matrix's input width (q, k, v, gate, up: h; o: a d_h; down: f):
//   per layer
//     norms     n 4 s b h       the residual stream is 16-bit (the embedding is): each RMSNorm
//                               saves only its fp32 copy of the input (its 16-bit weight is
//                               frozen, so the normalized tensor is not saved)
//     attention E s b (2q + 2k) as full fine-tuning: q, k, v and the output
//     mlp       3 E s b f       the gate and up outputs and the activation; the product is saved
//                               only for down's weight gradient, which a frozen down has none of
//     adapters  sum over the adapted matrices of E s b (d_in + r): lora_A's 16-bit copy of its
//                               input and lora_B's input (x A); the frozen base linear saves no
//                               input (it needs none for the input gradient)
//     scores, dropout           as full fine-tuning (autocast_activations.h)
//   outside the layers: 8 s b (ids); 4 s b V (the loss's fp32 log-softmax) + 4 s b h (the final
//   norm's fp32 copy; lm_head is frozen: its input is not saved); the loss backward 8 s b V.
// No 16-bit weight copies are saved: the base is already 16-bit (the adapters' casts are
// negligible). QLoRA (`--qlora`: the base's linears in NF4, bitsandbytes' matmul_4bit): the same
// but the adapters, which save the inputs they share with the base instead of copies:
//     adapters  E s b (distinct adapted inputs + r per adapted matrix): h if any of q, k, v is
//               adapted (the first norm's output), h if gate or up, f if down (the product); o's
//               input is the attention output, already counted
// (the QLoRA figures of estimator/README.md).
#pragma once

#include <vector>

#include "absl/status/statusor.h"

#include "estimator/model_spec.h"
#include "estimator/term.h"
#include "estimator/training_config.h"

namespace fragscope::estimator {

// Whether the LoRA terms describe `config` on `spec`: LoRA or QLoRA on a dense Llama-family
// decoder, one GPU.
bool LoraActivationsApply(const ModelSpec& spec, const TrainingConfig& config);

// Terms "activations", "activations_embedding", "activations_output" and "loss_backward", by
// the formula above. REQUIRES: LoraActivationsApply(spec, config).
absl::StatusOr<std::vector<Term>> LoraActivationTerms(const ModelSpec& spec,
                                                      const TrainingConfig& config);

}  // namespace fragscope::estimator
