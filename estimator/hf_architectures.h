// The structure transformers 5.17 builds for each decoder-only model type, as far as the
// parameter count needs it and its config.json does not state it (read from each type's
// modeling_*.py). Entries list only what differs from a Llama-style decoder: gated MLP, RMSNorm,
// no biases, rotary positions, untied output layer, two norms per layer.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

#include "estimator/model_spec.h"

namespace fragscope::estimator {

// Which biases a config's attention_bias switches on.
enum class AttentionBiasKey : uint8_t { kQkvAndOut, kQkvOnly, kIgnored };

struct Architecture {
  absl::string_view model_type;
  bool gated_mlp = true;
  NormKind norm = NormKind::kRmsNorm;
  bool norm_bias = true;        // LayerNorm only
  bool norm_parameters = true;  // false: OLMo's non-parametric LayerNorm
  int64_t norms_per_layer = 2;
  bool tied_embeddings = false;  // when the config has no tie_word_embeddings
  bool qkv_bias = false;         // defaults before the config's bias switches
  bool attention_out_bias = false;
  bool mlp_bias = false;
  bool lm_head_bias = false;
  AttentionBiasKey attention_bias_key = AttentionBiasKey::kQkvAndOut;
  QkNorm qk_norm = QkNorm::kNone;                     // always present
  const char* qk_norm_switch = nullptr;               // a config key that adds q/k norms...
  QkNorm qk_norm_when_switched = QkNorm::kFullWidth;  // ...of this shape
  bool qk_norm_bias = false;
  bool parallel_attention = false;        // always
  const char* parallel_switch = nullptr;  // a config key that makes it parallel...
  bool parallel_shares_norm = false;      // ...with one norm per layer instead of two
  PositionKind positions = PositionKind::kRotary;
  int64_t extra_position_rows = 0;  // OPT's table has max_position_embeddings + 2 rows
  bool fused_qkv = false;
  bool fused_gate_up = false;
  bool shared_expert_gate = false;  // a shared expert comes with a sigmoid gate (Qwen2-MoE)
  // Class defaults for absent keys, where one value fits every size of the family (GPT-2's
  // vocabulary and positions); 0: the key is required.
  int64_t default_vocab_size = 0;
  int64_t default_positions = 0;
  const char* default_activation = "silu";  // the class default of hidden_act / activation_function
  // Reads what only this type's config says (Falcon's attention layouts, OPT's refusals);
  // nullptr for none.
  absl::Status (*adjust)(const nlohmann::json& config, ModelSpec& spec) = nullptr;
};

// The entry for `model_type`, or nullptr when it is not known.
const Architecture* FindArchitecture(absl::string_view model_type);

// The entry unknown types are read with (Llama-style).
const Architecture& LlamaStyleArchitecture();

}  // namespace fragscope::estimator
