// LoRA and QLoRA: trainable adapter counts and NF4 storage cost.
//
// LoRA (Hu et al., arXiv:2106.09685) adds, to each adapted d_in x d_out matrix, A (r x d_in) and
// B (d_out x r): r (d_in + d_out) trainable parameters. Matrices per layer: q (h -> a d_h),
// k and v (h -> g d_h), o (a d_h -> h), gate and up (h -> f), down (f -> h); for a non-gated MLP
// "up" is fc1 and "down" fc2; MoE layers adapt every expert. Example (reference 7): r = 8 on
// q,k,v,o of Llama-2-7B = 32 * 4 * 8 * 8192 = 8,388,608 parameters.
//
// QLoRA (Dettmers et al., arXiv:2305.14314) stores the block linear weights in NF4: 4 bits plus
// one fp32 absmax per 64 weights (0.5 bit), or with double quantization an 8-bit absmax per 64
// and one fp32 constant per 256 blocks: 8/64 + 32/(64*256) = 0.127 bit. Bytes per weight:
// 4.5 / 8 = 0.5625 without, 4.127 / 8 = 0.515869 with double quantization. Embeddings, output
// layer, norms and biases stay 16-bit.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "estimator/model_spec.h"

namespace fragscope::estimator {

enum LoraTarget : uint32_t {
  kLoraQ = 1u << 0,
  kLoraK = 1u << 1,
  kLoraV = 1u << 2,
  kLoraO = 1u << 3,
  kLoraGate = 1u << 4,
  kLoraUp = 1u << 5,
  kLoraDown = 1u << 6,
};
// "all": every matrix; on a non-gated MLP the absent gate is simply skipped.
inline constexpr uint32_t kLoraAll =
    kLoraQ | kLoraK | kLoraV | kLoraO | kLoraGate | kLoraUp | kLoraDown;

struct LoraConfig {
  int64_t rank = 0;                    // 0 = full fine-tuning (no LoRA)
  uint32_t targets = kLoraQ | kLoraV;  // the LoRA paper's choice for GPT-3
  bool qlora = false;                  // base block weights in NF4
  bool double_quant = true;            // QLoRA double quantization of the absmax constants

  bool enabled() const { return rank > 0; }
};

// "q,k,v,o,gate,up,down" in any order; also the Hugging Face names q_proj, k_proj, v_proj,
// o_proj, gate_proj, up_proj, down_proj, and "all". An unknown name is an error naming it.
absl::StatusOr<uint32_t> ParseLoraTargets(absl::string_view csv);
std::string LoraTargetsName(uint32_t targets);

// Trainable adapter parameters in one transformer layer.
// Errors: rank <= 0, no targets, or "gate" on a model without a gated MLP.
absl::StatusOr<int64_t> LoraParametersPerLayer(const ModelSpec& spec, const LoraConfig& lora);

// Adafactor's factored second moment for the adapters of one layer: A (r x d_in) keeps r + d_in
// values and B (d_out x r) keeps d_out + r. REQUIRES: LoraParametersPerLayer(spec, lora) is OK.
int64_t LoraFactoredSecondMomentPerLayer(const ModelSpec& spec, const LoraConfig& lora);

// 0.5625 (double_quant false) or 0.515869140625 (true).
double Nf4BytesPerWeight(bool double_quant);

}  // namespace fragscope::estimator
