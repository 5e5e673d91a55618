// Model specs from JSON: fragscope's own schema, or a Hugging Face config.json.
//
// Own schema (strict: an unknown key is an error naming it). Every key is optional; "base" starts
// from a preset and the other keys override it; "linear_biases" sets qkv_bias,
// attention_out_bias and mlp_bias at once. Keys equal the ModelSpec field names:
//   {"name": "my-7b", "base": "llama-2-7b", "num_layers": 32, "hidden_size": 4096,
//    "num_heads": 32, "num_kv_heads": 8, "head_dim": 128, "ffn_size": 11008, "gated_mlp": true,
//    "vocab_size": 32000, "tied_embeddings": false, "norm": "rmsnorm", "linear_biases": false,
//    "position_embedding": "rotary", "max_positions": 0, "embedding_norm": false,
//    "num_experts": 0, "experts_top_k": 0, "moe_ffn_size": 0, "parameter_count": 0,
//    "fused_qkv": false, "python_gelu": false, "logit_softcapping": false, "qkv_bias": false,
//    "attention_out_bias": false,
//    "mlp_bias": false, "lm_head_bias": false, "qk_norm": "none", "qk_norm_bias": false,
//    "v_head_dim": 0, "q_lora_rank": 0, "kv_lora_rank": 0, "qk_rope_head_dim": 0,
//    "parallel_attention": false, "fused_gate_up": false, "activation": "silu",
//    "dense_layers": 0, "shared_expert_ffn_size": 0, "shared_expert_gate": false,
//    "norm_bias": true, "norm_parameters": true, "norms_per_layer": 2}
//
// A Hugging Face config.json (recognised by its "model_type"; other keys are ignored) is read by
// hf_config.h: every decoder-only type, known ones exactly, unknown ones as Llama-style decoders
// with the assumption stated in the spec.
//
// Errors are kInvalidArgument naming the key, e.g. "hidden_size: expected a non-negative
// integer, got -5", and the result is validated (ValidateModelSpec).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "estimator/model_spec.h"

namespace fragscope::estimator {

absl::StatusOr<ModelSpec> ModelSpecFromJson(absl::string_view json_text);

// The most a model spec file may hold: the largest published config.json is a few KiB, and
// a stream without end (/dev/zero, a pipe) must stop somewhere.
inline constexpr size_t kMaxModelSpecFileBytes = size_t{64} << 20;

// Reads `path` ("-": standard input; pipes and devices too, at most kMaxModelSpecFileBytes) and
// parses it; a missing file is kNotFound naming the path, a longer one an error saying the
// bound, and parse errors are prefixed with the path.
absl::StatusOr<ModelSpec> LoadModelSpecFile(const std::string& path);

}  // namespace fragscope::estimator
